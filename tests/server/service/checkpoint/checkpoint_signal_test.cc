// The checkpoint SIGTERM takes holds everything the server acknowledged
// (issue 26): adds keep arriving while it is written, and each one is either
// in the restored checkpoint or was answered UNAVAILABLE, also when another
// checkpoint was being written when the signal came.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "proto/append.h"
#include "proto/codec.h"
#include "server/service/checkpoint/checkpoint_test_util.h"
#include "server/service/loopback_transport.h"
#include "server/service/service_test_util.h"
#include "service/replay_service.h"

namespace perserve::service {
namespace {

using namespace checkpoint_test;
using proto::MessageKind;

constexpr int kActors = 2;
constexpr int64_t kBatch = 10;
constexpr int64_t kCapacity = 1 << 14;
constexpr int64_t kObsBytes = 4096;      // rows large enough that a checkpoint takes many passes

class CheckpointSignalTest : public CheckpointTest {
 protected:
  // Each actor adds a batch every pass; SIGTERM comes at pass `signal_pass`
  // (after a checkpoint asked for at `asked_pass`, if >= 0). Each actor stops
  // adding at its first UNAVAILABLE and closes. Returns the items acknowledged.
  int64_t RunUntilStopped(int asked_pass, int signal_pass) {
    const ServiceOptions options = Options();  // makes replay_ first
    LoopbackTransport transport(kActors);
    ReplayService service(replay_.get(), &transport, options);

    bool refused[kActors] = {};
    std::vector<uint64_t> next_request(kActors, 1);
    int64_t acknowledged = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int pass = 0; !service.done(); ++pass) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the service did not stop within 60 s";
        break;
      }
      if (pass == asked_pass) {
        EXPECT_TRUE(service.RequestCheckpoint("test").ok());
      }
      if (pass == signal_pass) {
        if (asked_pass >= 0) {
          EXPECT_TRUE(service.checkpoints()->active()) << "the asked checkpoint ended too soon";
        }
        pending_signal_ = SIGTERM;
      }
      for (int actor = 0; actor < kActors; ++actor) {
        if (!refused[actor]) transport.Push(actor, AddFrame(next_request[actor]++));
      }
      bool handled = false;
      if (!service.Step(&handled).ok()) {
        ADD_FAILURE() << "pass " << pass << ": the service's step failed";
        break;
      }
      for (int actor = 0; actor < kActors; ++actor) acknowledged += TakeReplies(transport, actor, &refused[actor]);
    }
    EXPECT_FALSE(service.checkpoints()->active());
    return acknowledged;
  }

  // Checkpoints under dir_ written a row or so a pass, signals from
  // pending_signal_; and a fresh replay_ to serve.
  ServiceOptions Options() {
    ServiceOptions options;
    options.stats_interval_seconds = 0.0;
    options.checkpoint_dir = dir_.string();
    options.checkpoint_slice = std::chrono::microseconds(1);
    options.take_signal = [this] { return std::exchange(pending_signal_, 0); };
    replay_ = MakeReplay(kCapacity, 17, 0.6, kObsBytes, kActors);
    return options;
  }

  // An add of kBatch transitions after whatever the actor's stream holds;
  // their columns are zeros (the count is what is checked).
  std::vector<std::byte> AddFrame(uint64_t request_id) const {
    const std::vector<std::byte> columns(static_cast<size_t>(kBatch * replay_->step_schema().ItemBytes()));
    return service_test::AddFrame(request_id, proto::AppendMeta::kAtEnd, kBatch, columns);
  }

  // Pops `actor`'s replies: returns the items acknowledged; at the first
  // UNAVAILABLE sets *refused and sends its close (answered, not counted).
  int64_t TakeReplies(LoopbackTransport& transport, int actor, bool* refused) {
    int64_t acknowledged = 0;
    auto& outbox = transport.outbox(actor);
    for (; !outbox.empty(); outbox.pop_front()) {
      proto::Frame frame;
      EXPECT_TRUE(proto::DecodeFrame(outbox.front(), &frame).ok()) << "actor " << actor;
      if (frame.kind() == MessageKind::kAddReply) {
        proto::AddReply reply;
        EXPECT_TRUE(proto::DecodeMeta(frame, &reply).ok());
        acknowledged += reply.count;
      } else if (frame.kind() == MessageKind::kErrorReply) {
        proto::ErrorReply error;
        EXPECT_TRUE(proto::DecodeMeta(frame, &error).ok());
        EXPECT_EQ(error.code, static_cast<int32_t>(Status::Code::kUnavailable)) << error.message;
        EXPECT_NE(error.message.find("checkpoint"), std::string::npos) << "names no checkpoint: " << error.message;
        if (!*refused) transport.Push(actor, service_test::Frame(MessageKind::kCloseRequest, 0, proto::Empty{}));
        *refused = true;
      } else {
        EXPECT_EQ(frame.kind(), MessageKind::kCloseReply) << "actor " << actor;
      }
    }
    return acknowledged;
  }

  // The newest complete checkpoint under dir_: the items ever added to it
  // (it holds the newest kCapacity of them: while a checkpoint's files are
  // synced the actors go on adding, as many passes as the disk takes).
  uint64_t RestoredItemsAdded() {
    auto restored = MakeReplay(kCapacity, 17, 0.6, kObsBytes, kActors);
    CheckpointState state;
    std::string loaded;
    const Status status = LoadCheckpoint(dir_.string(), 0, 1, restored.get(), &state, &loaded);
    EXPECT_TRUE(status.ok()) << status.ToString();
    const replay::Replay& items = restored->items();
    EXPECT_EQ(items.size(), std::min<int64_t>(static_cast<int64_t>(items.next_key()), kCapacity)) << loaded;
    return items.next_key();
  }

  int pending_signal_ = 0;
  std::unique_ptr<replay::StepReplay> replay_;
};

TEST_F(CheckpointSignalTest, EveryAddAcknowledgedBeforeSigtermIsInItsCheckpoint) {
  const int64_t acknowledged = RunUntilStopped(/*asked_pass=*/-1, /*signal_pass=*/20);
  EXPECT_GE(acknowledged, 20 * kActors * kBatch);
  EXPECT_EQ(RestoredItemsAdded(), static_cast<uint64_t>(acknowledged))
      << "adds acknowledged while the final checkpoint was written are not in it";
}

TEST_F(CheckpointSignalTest, ACheckpointBeingWrittenWhenSigtermComesIsFollowedByTheFinalOne) {
  const int64_t acknowledged = RunUntilStopped(/*asked_pass=*/5, /*signal_pass=*/10);
  EXPECT_EQ(RestoredItemsAdded(), static_cast<uint64_t>(acknowledged))
      << "the server stopped after the checkpoint begun before SIGTERM, which lacks the adds acknowledged since";
}

// SIGTERM while a checkpoint is written, and every client closes before that
// one ends: the service goes on until SIGTERM's own checkpoint is complete
// (it ended with neither: done() looked only at a final one being written).
TEST_F(CheckpointSignalTest, TheLastClientsCloseDoesNotEndTheServiceBeforeSigtermsCheckpoint) {
  const ServiceOptions options = Options();  // makes replay_ first
  LoopbackTransport transport(kActors);
  ReplayService service(replay_.get(), &transport, options);
  bool refused[kActors] = {};
  int64_t acknowledged = 0;
  for (uint64_t request = 1; request <= 20; ++request) {
    for (int actor = 0; actor < kActors; ++actor) transport.Push(actor, AddFrame(request));
    bool handled = false;
    ASSERT_TRUE(service.Step(&handled).ok());
  }
  ASSERT_TRUE(service.RequestCheckpoint("test").ok());
  pending_signal_ = SIGTERM;
  for (int actor = 0; actor < kActors; ++actor) {
    transport.Push(actor, service_test::Frame(MessageKind::kCloseRequest, 21, proto::Empty{}));
  }
  bool handled = false;
  ASSERT_TRUE(service.Step(&handled).ok());
  ASSERT_TRUE(service.checkpoints()->active()) << "the asked checkpoint ended too soon for this test";
  for (int actor = 0; actor < kActors; ++actor) acknowledged += TakeReplies(transport, actor, &refused[actor]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!service.done() && std::chrono::steady_clock::now() < deadline) ASSERT_TRUE(service.Step(&handled).ok());
  EXPECT_FALSE(service.checkpoints()->active());
  EXPECT_EQ(service.checkpoints()->last_path(), (dir_ / "shard-0-of-1" / "checkpoint-000001").string())
      << "SIGTERM's checkpoint, after the one asked for, was never written";
  EXPECT_EQ(RestoredItemsAdded(), static_cast<uint64_t>(acknowledged));
}

// SIGTERM to the server alone: its clients live on and get the grace to see
// UNAVAILABLE and close counted from the end of the final checkpoint (while
// it is written perserve-server answers nothing), not from its beginning.
TEST_F(CheckpointSignalTest, TheClientsGraceAfterSigtermRunsFromTheFinalCheckpointsEnd) {
  ServiceOptions options = Options();
  auto now = std::chrono::steady_clock::now();
  options.clock = [&now] { return now; };
  LoopbackTransport transport(kActors);
  ReplayService service(replay_.get(), &transport, options);
  bool handled = false;
  for (uint64_t request = 1; request <= 20; ++request) {
    for (int actor = 0; actor < kActors; ++actor) transport.Push(actor, AddFrame(request));
    ASSERT_TRUE(service.Step(&handled).ok());
  }
  pending_signal_ = SIGTERM;
  ASSERT_TRUE(service.Step(&handled).ok());
  ASSERT_TRUE(service.checkpoints()->active());
  while (service.checkpoints()->active()) {
    now += std::chrono::seconds(1);  // a checkpoint that takes longer than the grace
    ASSERT_TRUE(service.Step(&handled).ok());
  }
  EXPECT_FALSE(service.done()) << "the clients had no time after the final checkpoint to see UNAVAILABLE";
  now += std::chrono::seconds(9);
  ASSERT_TRUE(service.Step(&handled).ok());
  EXPECT_FALSE(service.done());
  now += std::chrono::seconds(2);
  EXPECT_TRUE(service.done()) << "10 s after the final checkpoint the grace is over";
}

}  // namespace
}  // namespace perserve::service
