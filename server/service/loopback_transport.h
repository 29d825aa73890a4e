// LoopbackTransport: an in-memory Transport, so the service loop is tested
// without mpirun. Tests push frames into a client's inbox and read the
// replies from its outbox.
#pragma once

#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "proto/messages.h"
#include "service/transport.h"

namespace perserve::service {

class LoopbackTransport final : public Transport {
 public:
  explicit LoopbackTransport(int clients)
      : inboxes_(clients), outboxes_(clients), roles_(clients, ClientRole::kUnknown) {}

  // Test side.
  void Push(int client, std::vector<std::byte> frame, int tag = proto::kRequestTag) {
    inboxes_[client].push_back({std::move(frame), tag});
  }
  std::deque<std::vector<std::byte>>& outbox(int client) { return outboxes_[client]; }
  size_t waiting(int client) const { return inboxes_[client].size(); }
  // Before the service is made: it counts the roles once, at its start.
  void SetRole(int client, ClientRole role) { roles_[client] = role; }
  // Makes every later Send fail, as an MPI_Isend can.
  void FailSends(bool fail) { fail_sends_ = fail; }

  // Service side.
  int client_count() const override { return static_cast<int>(inboxes_.size()); }
  Status TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) override {
    *received = !inboxes_[client].empty();
    if (*received) {
      *buffer = std::move(inboxes_[client].front().first);
      *tag = inboxes_[client].front().second;
      inboxes_[client].pop_front();
    }
    return Status::Ok();
  }
  Status Send(int client, std::vector<std::byte> frame) override {
    if (fail_sends_) return Status::Internal("loopback send failed (FailSends)");
    outboxes_[client].push_back(std::move(frame));
    return Status::Ok();
  }
  // A reply is unread until the test pops it from the outbox.
  Unread UnreadSampleReplies(int client) const override {
    Unread unread;
    for (const std::vector<std::byte>& frame : outboxes_[client]) {
      uint16_t kind = 0;
      if (frame.size() >= proto::kFrameHeaderBytes) std::memcpy(&kind, frame.data() + 6, sizeof(kind));
      if (kind != static_cast<uint16_t>(proto::MessageKind::kSampleReply)) continue;
      ++unread.replies;
      unread.bytes += static_cast<int64_t>(frame.size());
    }
    return unread;
  }
  ClientRole Role(int client) const override { return roles_[client]; }
  Status Progress() override { return Status::Ok(); }
  Status Drain() override { return Status::Ok(); }

 private:
  std::vector<std::deque<std::pair<std::vector<std::byte>, int>>> inboxes_;
  std::vector<std::deque<std::vector<std::byte>>> outboxes_;
  std::vector<ClientRole> roles_;
  bool fail_sends_ = false;
};

}  // namespace perserve::service
