// fuzz_service: the replay rank's request handling, as a peer can drive it.
// A fresh table of transitions (CPU tree, 64 steps, fuzz::ServiceSchema) behind a
// ReplayService over a LoopbackTransport with two clients (built again as
// fuzz_step_service, PERSERVE_FUZZ_STEPS: a server of step streams over
// fuzz::StepServiceSchema, 2-step transitions, 64 steps); the input's
// records (fuzz/inputs.h) are pushed as received messages, with Step() and
// reply reading where they say, then the service runs until nothing moves.
//
// Checked throughout (the rules of replay_service.h):
// - Step() returns OK whatever arrives, and never crashes or hits UB;
// - every reply decodes, is a reply kind whose meta decodes as that kind's
//   struct, with the bulk that kind carries, and answers a request of that
//   client not answered yet (one reply per request at most);
// - nothing reaches a client after its close reply;
// - the replay stays within its capacity and its tree's total is finite.
// Checked at the end: an open client's requests are all answered once items
// are stored; otherwise only sample requests wait (deferred, at most
// max_deferred_samples), as they may for a closed client (close drops them),
// whose later messages are never read.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include <spdlog/spdlog.h>

#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"
#include "fuzz/step_replay_fixture.h"
#include "proto/codec.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"

namespace perserve::service {
namespace {

constexpr int64_t kCapacity = 64;
#ifdef PERSERVE_FUZZ_STEPS
constexpr bool kSteps = true;
#else
constexpr bool kSteps = false;
#endif
// Small enough that a sample costs microseconds ...
constexpr int64_t kMaxSampleBatch = 1024;

ServiceOptions FuzzOptions() {
  ServiceOptions options;
  options.min_size_to_sample = 1;
  options.stats_interval_seconds = 0;
  options.max_sample_batch = kMaxSampleBatch;
  // ... and a few of the largest replies reach the unread-bytes allowance, so
  // both allowances (replies and bytes) are exercised.
  options.max_unread_reply_bytes = int64_t{64} << 10;
  return options;
}

// What one client sent and got back.
struct Ledger {
  std::multiset<uint64_t> unanswered;  // request ids (0 for a message too short to carry one)
  bool closed = false;                 // its close reply has come
};

// The request id the service answers a message with (RequestIdOf in replay_service.cc).
uint64_t RequestIdOf(std::span<const std::byte> message) {
  proto::FrameHeader header;
  if (message.size() < sizeof(header)) return 0;
  std::memcpy(&header, message.data(), sizeof(header));
  return header.request_id;
}

template <class Meta>
bool MetaDecodes(const proto::Frame& frame, Meta* meta) {
  return proto::DecodeMeta(frame, meta).ok();
}

void CheckReply(const proto::Frame& frame, int64_t item_bytes) {
  switch (frame.kind()) {
    case proto::MessageKind::kAddReply: {
      proto::AddReply reply;
      FUZZ_CHECK(MetaDecodes(frame, &reply));
      // An append of steps alone creates no item.
      FUZZ_CHECK(reply.count >= (kSteps ? 0 : 1) && reply.count <= kCapacity);
      FUZZ_CHECK(frame.bulk.empty());
      return;
    }
    case proto::MessageKind::kSampleReply: {
      proto::SampleReply reply;
      FUZZ_CHECK(MetaDecodes(frame, &reply));
      FUZZ_CHECK(reply.count >= 1 && reply.count <= kMaxSampleBatch);
      // Keys, weights, probabilities, then the items' columns.
      FUZZ_CHECK(frame.bulk.size() == static_cast<uint64_t>(reply.count * (3 * 8 + item_bytes)));
      return;
    }
    case proto::MessageKind::kShardSampleReply: {
      proto::ShardSampleReply reply;
      FUZZ_CHECK(MetaDecodes(frame, &reply));
      FUZZ_CHECK(reply.count >= 0 && reply.count <= kMaxSampleBatch);
      FUZZ_CHECK(reply.size >= 0 && reply.size <= kCapacity && reply.total >= 0.0);
      // Keys, leaves, then the items' columns.
      FUZZ_CHECK(frame.bulk.size() == static_cast<uint64_t>(reply.count * (2 * 8 + item_bytes)));
      return;
    }
    case proto::MessageKind::kCheckpointReply:
      FUZZ_CHECK(false && "a checkpoint reply from a server without --checkpoint-dir");
      return;
    case proto::MessageKind::kUpdateReply: {
      proto::UpdateReply reply;
      FUZZ_CHECK(MetaDecodes(frame, &reply));
      FUZZ_CHECK(reply.applied >= 0 && reply.stale >= 0 && reply.dropped >= 0);
      FUZZ_CHECK(frame.bulk.empty());
      return;
    }
    case proto::MessageKind::kCloseReply: {
      proto::Empty reply;
      FUZZ_CHECK(MetaDecodes(frame, &reply));
      FUZZ_CHECK(frame.bulk.empty());
      return;
    }
    case proto::MessageKind::kErrorReply: {
      proto::ErrorReply reply;
      FUZZ_CHECK(MetaDecodes(frame, &reply));
      FUZZ_CHECK(reply.code > 0 && reply.code <= static_cast<int32_t>(Status::Code::kDeadlineExceeded));
      FUZZ_CHECK(frame.bulk.empty());
      return;
    }
    default:
      FUZZ_CHECK(false && "a reply of a request kind or of no known kind");
  }
}

class Harness {
 public:
  Harness() : transport_(fuzz::kServiceClients) {
    replay::ReplayOptions options;
    options.capacity = kCapacity;
    options.alpha = 0.6;
    options.device = tree::Device::kCpu;
    options.seed = 7;
    FUZZ_CHECK(kSteps ? fuzz::MakeStepServiceReplay(options, &replay_)
                      : fuzz::MakeTransitionServiceReplay(options, &replay_));
    service_ = std::make_unique<ReplayService>(replay_.get(), &transport_, FuzzOptions());
    item_bytes_ = replay_->SampleItemBytes();
  }

  void Push(const fuzz::ServiceRecord& record) {
    if (record.read_replies_first) ReadReplies(record.client);
    // An add's columns apart get no reply: taken by an add, or dropped (logged).
    if (!record.columns_tag) ledgers_[record.client].unanswered.insert(RequestIdOf(record.frame));
    transport_.Push(record.client, std::vector<std::byte>(record.frame.begin(), record.frame.end()),
                    record.columns_tag ? proto::kAddColumnsTag
                    : record.reply_tag ? proto::kReplyTag
                                       : proto::kRequestTag);
    if (record.step_after) Step();
  }

  // Reads every reply and steps until a step handles nothing and sends nothing.
  void Settle() {
    for (;;) {
      for (int client = 0; client < fuzz::kServiceClients; ++client) ReadReplies(client);
      const bool handled = Step();
      bool replied = false;
      for (int client = 0; client < fuzz::kServiceClients; ++client) replied |= !transport_.outbox(client).empty();
      if (!handled && !replied) return;
    }
  }

  void CheckSettled() const {
    const int64_t max_deferred = FuzzOptions().max_deferred_samples;
    for (int client = 0; client < fuzz::kServiceClients; ++client) {
      const Ledger& ledger = ledgers_[client];
      // Requests left unreceived (columns messages are not requests: no ledger entry).
      const int64_t waiting = static_cast<int64_t>(transport_.waiting(client) -
                                                   transport_.waiting(client, proto::kAddColumnsTag));
      const int64_t unanswered = static_cast<int64_t>(ledger.unanswered.size());
      if (ledger.closed) {
        FUZZ_CHECK(unanswered >= waiting && unanswered - waiting <= max_deferred);
        continue;
      }
      FUZZ_CHECK(waiting == 0);
      // Unanswered: samples waiting for a first item, and adds whose columns
      // never came (with what waits behind them: the client's later adds, a close).
      const int64_t held = service_->held_adds(client);
      FUZZ_CHECK(unanswered <= held + (held > 0 ? 1 : 0) + (replay_->items().size() == 0 ? max_deferred : 0));
    }
    FUZZ_CHECK(service_->done() == (ledgers_[0].closed && ledgers_[1].closed));
  }

 private:
  bool Step() {
    bool handled = false;
    FUZZ_CHECK(service_->Step(&handled).ok());
    FUZZ_CHECK(replay_->items().size() <= replay_->items().capacity());
    FUZZ_CHECK(replay_->steps().held() <= replay_->steps().capacity());
    const double total = replay_->items().tree().Total();
    FUZZ_CHECK(std::isfinite(total) && total >= 0.0);
    return handled;
  }

  void ReadReplies(int client) {
    Ledger& ledger = ledgers_[client];
    std::deque<std::vector<std::byte>>& outbox = transport_.outbox(client);
    while (!outbox.empty()) {
      const std::vector<std::byte> reply = std::move(outbox.front());
      outbox.pop_front();
      FUZZ_CHECK(!ledger.closed);
      proto::Frame frame;
      FUZZ_CHECK(proto::DecodeFrame(reply, &frame).ok());
      CheckReply(frame, item_bytes_);
      const auto request = ledger.unanswered.find(frame.header.request_id);
      FUZZ_CHECK(request != ledger.unanswered.end());
      ledger.unanswered.erase(request);
      if (frame.kind() == proto::MessageKind::kCloseReply) ledger.closed = true;
    }
  }

  LoopbackTransport transport_;
  std::unique_ptr<replay::StepReplay> replay_;  // transitions, or (fuzz_step_service) 2-step items
  std::unique_ptr<ReplayService> service_;
  int64_t item_bytes_ = 0;  // of a sampled item
  Ledger ledgers_[fuzz::kServiceClients];
};

}  // namespace
}  // namespace perserve::service

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // every bad request logs a warning
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perserve::service::Harness harness;
  for (const auto& record : perserve::fuzz::ParseServiceInput(std::as_bytes(std::span(data, size)))) {
    harness.Push(record);
  }
  harness.Settle();
  harness.CheckSettled();
  return 0;
}
