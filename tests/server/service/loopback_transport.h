// LoopbackTransport: an in-memory Transport, so the service loop is tested
// without mpirun. Tests push frames into a client's inbox (the client sends
// them) and read the replies from its outbox (the client receives them).
//
// It keeps the MPI rules the service depends on, as MpiTransport meets them:
//   - Non-overtaking: a client's messages are matched in the order it sent
//     them (Push order) among those a receive or probe can match. TryReceive
//     (any tag, like MPI_Improbe with MPI_ANY_TAG) takes the oldest message
//     not yet received; ProbeColumns (tag kAddColumnsTag) matches the oldest
//     columns message, so it may pass requests sent before it, never another
//     columns message.
//   - A matched probe claims its message (MPI_Improbe + MPI_Mrecv):
//     ProbeColumns takes the columns message it matched out of the order
//     TryReceive sees; only ReceiveColumns receives it, and until then
//     ProbeColumns answers that same message again (MpiTransport remembers
//     it). ColumnsArrived asks without claiming (MPI_Iprobe).
//   - Arrival: a message arrives when the test pushes it, so a probe that
//     found nothing says nothing about a later receive, which can match a
//     message no probe has seen.
//   - Completion: a send of at most eager_limit bytes completes at once
//     (eager); a larger one only when the client takes it from its outbox
//     (rendezvous), so until then a sample reply (or a shard sample's reply
//     with rows: both go through SendSampleReply, which MpiTransport tracks)
//     counts as unread. The default limit 0 makes every send rendezvous.
//     Rows sent from the store (SendRowsInPlace) are read only when the
//     client receives them (Deliver). The same limit holds for a client's
//     tracked sends (PushTracked, PushLent: the client library's): past it
//     a send completes only when the service receives the message, and
//     lent bytes are read only then.
//   - Receive order: a client receives its replies in the order they were
//     sent (one tag, one pair), so Deliver puts a reply in flight into the
//     outbox ahead of the replies sent after it, and NextReplyInFlight tells
//     a client that reads in order when its next reply is one still in flight.
// Not modelled: messages lost or failing in flight (but FailSends), and
// Drain, which returns at once (the test takes the replies afterwards).
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "proto/messages.h"
#include "service/transport/transport.h"
#include "store/transition_store.h"

namespace perserve::service {

class LoopbackTransport final : public Transport {
 public:
  explicit LoopbackTransport(int clients)
      : inboxes_(clients), outboxes_(clients), roles_(clients, ClientRole::kUnknown) {}

  // Test side.
  void Push(int client, std::vector<std::byte> frame, int tag = proto::kRequestTag) {
    inboxes_[client].push_back({std::move(frame), tag, /*claimed=*/false});
  }
  // A send whose completion the client waits for (the client library's:
  // Connection::AwaitSent, the drain of Close): up to the eager limit it
  // completes now; a larger one when the service receives the message
  // (rendezvous). Returns its token for SendCompleted.
  uint64_t PushTracked(int client, std::vector<std::byte> frame, int tag = proto::kRequestTag) {
    const uint64_t token = next_client_send_++;
    if (frame.size() > eager_limit_) pending_client_sends_.push_back(token);
    inboxes_[client].push_back({std::move(frame), tag, /*claimed=*/false, {}, token});
    return token;
  }
  // The same for bytes the client lends (MPI: a datatype over its memory,
  // ActorClient::AddBorrowed): up to the eager limit they are copied now;
  // past it they are read where they lie only when the service receives the
  // message, so memory changed before then arrives changed.
  uint64_t PushLent(int client, std::vector<std::span<const std::byte>> regions, int tag) {
    size_t bytes = 0;
    for (const std::span<const std::byte> region : regions) bytes += region.size();
    if (bytes <= eager_limit_) return PushTracked(client, Gather(regions), tag);
    const uint64_t token = next_client_send_++;
    pending_client_sends_.push_back(token);
    inboxes_[client].push_back({{}, tag, /*claimed=*/false, std::move(regions), token});
    return token;
  }
  // Whether the tracked send `token` has completed.
  bool SendCompleted(uint64_t token) const {
    return std::find(pending_client_sends_.begin(), pending_client_sends_.end(), token) == pending_client_sends_.end();
  }
  std::deque<std::vector<std::byte>>& outbox(int client) { return outboxes_[client]; }
  // The messages of `client` not received yet (claimed ones too) ...
  size_t waiting(int client) const { return inboxes_[client].size(); }
  // ... of them, those of `tag`.
  size_t waiting(int client, int tag) const {
    return static_cast<size_t>(std::count_if(inboxes_[client].begin(), inboxes_[client].end(),
                                             [tag](const Message& message) { return message.tag == tag; }));
  }
  // ... of them, the one a matched probe has claimed (0 or 1).
  size_t claimed(int client) const {
    return static_cast<size_t>(std::count_if(inboxes_[client].begin(), inboxes_[client].end(),
                                             [](const Message& message) { return message.claimed; }));
  }
  // Sends of at most `bytes` complete at once; larger ones when taken (see above).
  void SetEagerLimit(size_t bytes) { eager_limit_ = bytes; }
  // Before the service is made: it counts the roles once, at its start.
  void SetRole(int client, ClientRole role) { roles_[client] = role; }
  // How the service's logs and descriptions name `client` (default "client N").
  void SetName(int client, std::string name) {
    names_.resize(inboxes_.size());
    names_[client] = std::move(name);
  }
  // Sees every reply as the service sends it (SendSampleReplyBlocks' in
  // place too: its bytes as they stand at the send), in the order of the service's actions: the simulation's
  // model of step streams follows the service's order of appends so.
  void ObserveSends(std::function<void(int client, std::span<const std::byte> frame)> observer) {
    observer_ = std::move(observer);
  }
  // Makes every later Send fail, as an MPI_Isend can.
  void FailSends(bool fail) { fail_sends_ = fail; }
  // From now on sample replies sent from where they lie
  // (SendSampleReplyBlocks) travel as over MPI: the blocks are read only when
  // the client receives the reply (Deliver); until then the reply is in
  // flight and unread, and its token is not handed back.
  void SendRowsInPlace(bool in_place) { rows_in_place_ = in_place; }
  // The client receives its oldest reply in flight: its blocks are read now,
  // the reply goes to its outbox ahead of the replies sent after it, its
  // token back. False when none is.
  bool Deliver(int client) {
    const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                                 [client](const InFlight& sent) { return sent.client == client; });
    if (it == in_flight_.end()) return false;
    // Read now: what the blocks name outside the frame (the ring's rows) as it stands at delivery.
    std::vector<std::byte> frame = GatherBlocks(it->frame, it->head_bytes, it->blocks);
    if (frame != it->as_sent && changed_in_flight_.empty()) {
      changed_in_flight_ = fmt::format(
          "a reply to client {} sent from where its bytes lie changed between its send and its delivery (the "
          "rows it reads were written while it was in flight)",
          client);
    }
    std::deque<std::vector<std::byte>>& outbox = outboxes_[client];
    outbox.insert(outbox.end() - static_cast<std::ptrdiff_t>(std::min(it->later_sends, outbox.size())),
                  std::move(frame));
    completed_.push_back(it->token);
    in_flight_.erase(it);
    return true;
  }
  size_t in_flight() const { return in_flight_.size(); }
  // The first reply sent from where its bytes lie whose bytes changed before
  // Deliver read them ("" when none did): the memory a send names must not
  // change until its token comes back.
  const std::string& changed_in_flight() const { return changed_in_flight_; }
  // Whether the next reply `client` receives, in send order, is one in
  // flight (Deliver it first): its oldest in flight was sent before every
  // reply in its outbox.
  bool NextReplyInFlight(int client) const {
    const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                                 [client](const InFlight& sent) { return sent.client == client; });
    return it != in_flight_.end() && it->later_sends >= outboxes_[client].size();
  }

  // Service side.
  int client_count() const override { return static_cast<int>(inboxes_.size()); }
  // The oldest message no probe has claimed, whatever its tag.
  Status TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) override {
    Inbox& inbox = inboxes_[client];
    const auto found =
        std::find_if(inbox.begin(), inbox.end(), [](const Message& message) { return !message.claimed; });
    *received = found != inbox.end();
    if (*received) {
      *buffer = Take(*found);
      *tag = found->tag;
      inbox.erase(found);
    }
    return Status::Ok();
  }
  bool TakesColumnsApart() const override { return true; }
  // The columns message claimed before, else claims the oldest one.
  Status ProbeColumns(int client, bool* arrived, int64_t* bytes) override {
    Inbox& inbox = inboxes_[client];
    auto found = std::find_if(inbox.begin(), inbox.end(), [](const Message& message) { return message.claimed; });
    if (found == inbox.end()) found = FindColumns(client);
    *arrived = found != inbox.end();
    if (*arrived) {
      found->claimed = true;
      *bytes = static_cast<int64_t>(found->size());
    }
    return Status::Ok();
  }
  Status ColumnsArrived(int client, bool* arrived) const override {
    const Inbox& inbox = inboxes_[client];
    *arrived = std::any_of(inbox.begin(), inbox.end(),
                           [](const Message& message) { return message.tag == proto::kAddColumnsTag; });
    return Status::Ok();
  }
  Status ReceiveColumns(int client, std::span<const std::span<std::byte>> regions) override {
    Inbox& inbox = inboxes_[client];
    const auto found = std::find_if(inbox.begin(), inbox.end(), [](const Message& message) { return message.claimed; });
    if (found == inbox.end()) return Status::Internal("ReceiveColumns before ProbeColumns found them");
    store::TransitionStore::CopyInto(Take(*found), regions);
    inbox.erase(found);
    return Status::Ok();
  }
  Status Send(int client, std::vector<std::byte> frame) override {
    if (fail_sends_) return Status::Internal("loopback send failed (FailSends)");
    if (observer_) observer_(client, frame);
    outboxes_[client].push_back(std::move(frame));
    for (InFlight& sent : in_flight_) sent.later_sends += sent.client == client;
    return Status::Ok();
  }
  Status SendSampleReplyBlocks(int client, std::vector<std::byte> frame, size_t head_bytes,
                               std::span<const ReplyBlock> blocks, uint64_t* token) override {
    if (!rows_in_place_) return Transport::SendSampleReplyBlocks(client, std::move(frame), head_bytes, blocks, token);
    if (fail_sends_) return Status::Internal("loopback send failed (FailSends)");
    // As the service sends it: the observer sees it so, and Deliver compares.
    std::vector<std::byte> as_sent = GatherBlocks(frame, head_bytes, blocks);
    if (observer_) observer_(client, as_sent);
    // `frame` moves into the record; its buffer, which blocks may lie in, stays where it is.
    in_flight_.push_back(InFlight{client, std::move(frame), head_bytes, {blocks.begin(), blocks.end()},
                                  std::move(as_sent), next_token_++, /*later_sends=*/0});
    *token = in_flight_.back().token;
    return Status::Ok();
  }
  void TakeCompletedRows(std::vector<uint64_t>* tokens) override {
    tokens->swap(completed_);
    completed_.clear();
  }
  // A reply is unread while in flight, and while in the outbox unless it went eagerly.
  Unread UnreadSampleReplies(int client) const override {
    Unread unread;
    for (const InFlight& sent : in_flight_) {
      if (sent.client != client) continue;
      ++unread.replies;
      unread.bytes += static_cast<int64_t>(sent.as_sent.size());
    }
    for (const std::vector<std::byte>& frame : outboxes_[client]) {
      proto::FrameHeader header;
      header.kind = 0;
      if (frame.size() >= proto::kFrameHeaderBytes) std::memcpy(&header, frame.data(), sizeof(header));
      // The replies the service sends with SendSampleReply: samples, and shard samples with rows.
      const bool sample_reply =
          header.kind == static_cast<uint16_t>(proto::MessageKind::kSampleReply) ||
          (header.kind == static_cast<uint16_t>(proto::MessageKind::kShardSampleReply) && header.bulk_bytes > 0);
      if (!sample_reply || frame.size() <= eager_limit_) continue;
      ++unread.replies;
      unread.bytes += static_cast<int64_t>(frame.size());
    }
    return unread;
  }
  ClientRole Role(int client) const override { return roles_[client]; }
  std::string ClientName(int client) const override {
    return static_cast<size_t>(client) < names_.size() && !names_[client].empty() ? names_[client]
                                                                                  : Transport::ClientName(client);
  }
  Status Progress() override { return Status::Ok(); }
  Status Drain() override { return Status::Ok(); }

 private:
  struct Message {
    std::vector<std::byte> bytes;
    int tag;
    bool claimed;  // matched by ProbeColumns: only ReceiveColumns takes it
    std::vector<std::span<const std::byte>> lent{};  // PushLent's: read when received
    uint64_t token = 0;                               // a tracked send's (0: untracked)
    size_t size() const {
      size_t lent_bytes = 0;
      for (const std::span<const std::byte> region : lent) lent_bytes += region.size();
      return lent.empty() ? bytes.size() : lent_bytes;
    }
  };
  static std::vector<std::byte> Gather(std::span<const std::span<const std::byte>> regions) {
    std::vector<std::byte> bytes;
    for (const std::span<const std::byte> region : regions) bytes.insert(bytes.end(), region.begin(), region.end());
    return bytes;
  }
  // The service receives `message`: its bytes (lent ones read now), and its send completes.
  std::vector<std::byte> Take(Message& message) {
    if (message.token != 0) std::erase(pending_client_sends_, message.token);
    return message.lent.empty() ? std::move(message.bytes) : Gather(message.lent);
  }
  using Inbox = std::deque<Message>;  // in the order the client sent them
  // The client's oldest unclaimed columns message (kAddColumnsTag), as MPI would match it.
  Inbox::iterator FindColumns(int client) {
    return std::find_if(inboxes_[client].begin(), inboxes_[client].end(), [](const Message& message) {
      return !message.claimed && message.tag == proto::kAddColumnsTag;
    });
  }

  std::vector<Inbox> inboxes_;
  std::vector<std::deque<std::vector<std::byte>>> outboxes_;
  std::vector<ClientRole> roles_;
  std::vector<std::string> names_;  // SetName's (empty: the default)
  bool fail_sends_ = false;
  std::function<void(int, std::span<const std::byte>)> observer_;
  size_t eager_limit_ = 0;
  struct InFlight {
    int client;
    std::vector<std::byte> frame;  // the head, then the copies the service made behind it
    size_t head_bytes;
    std::vector<ReplyBlock> blocks;
    std::vector<std::byte> as_sent;  // the message as its blocks stood at the send
    uint64_t token;
    size_t later_sends = 0;  // replies to `client` put in its outbox since (Deliver goes ahead of them)
  };
  bool rows_in_place_ = false;
  std::string changed_in_flight_;
  std::deque<InFlight> in_flight_;
  std::vector<uint64_t> completed_;
  uint64_t next_token_ = 1;
  std::vector<uint64_t> pending_client_sends_;  // tracked client sends not complete yet
  uint64_t next_client_send_ = 1;
};

}  // namespace perserve::service
