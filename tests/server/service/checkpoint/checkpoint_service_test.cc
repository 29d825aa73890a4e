// The service's checkpoint driver over the loopback transport: what follows a
// checkpoint's end (the next one queued) happens between operations, never
// inside an add.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"
#include "server/service/service_test_util.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service {
namespace {

namespace fs = std::filesystem;
using proto::MessageKind;
using service_test::Frame;

constexpr int kActor = 0;
// Steps of 132 KiB: the ring's slack is its least (256 steps), and a
// checkpoint's buffer of one column (1 MiB) overflows at its 8th step.
constexpr int64_t kCapacity = 64, kBatch = 8, kPayload = 132 << 10;

Schema PayloadSchema() { return Schema{{{"id", DType::kInt64, {}}, {"payload", DType::kUInt8, {kPayload}}}}; }

// Transitions first_id ..: each row's id, its payload bytes derived from it.
std::vector<std::byte> Columns(int64_t first_id) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> payload;
  for (int64_t i = 0; i < kBatch; ++i) {
    ids.push_back(first_id + i);
    payload.insert(payload.end(), kPayload, static_cast<uint8_t>(first_id + i));
  }
  std::vector<std::byte> columns(std::as_bytes(std::span(ids)).begin(), std::as_bytes(std::span(ids)).end());
  columns.insert(columns.end(), std::as_bytes(std::span(payload)).begin(), std::as_bytes(std::span(payload)).end());
  return columns;
}

class CheckpointServiceTest : public service_test::ServiceFixture {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("perserve-checkpoint-service-test-{}", ::getpid());
    fs::remove_all(dir_);
    ServiceOptions options = Options(1);
    options.checkpoint_dir = dir_.string();
    // Every append waiting is taken in one pass.
    options.messages_per_client_pass = 1 << 10;
    options.bytes_per_client_pass = int64_t{1} << 40;
    // Polled each pass between its messages and the checkpoint's slice: where
    // the test lets a full disk recover.
    options.take_signal = [this] {
      if (disk_full_) AllowWrites();
      return 0;
    };
    Start(1, kCapacity, PayloadSchema(), options, {ClientRole::kActor});
  }
  void TearDown() override {
    if (disk_full_) AllowWrites();
    std::error_code error;
    fs::remove_all(dir_, error);
  }

  // Files may not grow past 4 KiB (writes fail with EFBIG, as on a full
  // disk): the small state still fits, a column of 8 steps does not.
  void FillDisk() {
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &limit_), 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = limit_;
    small.rlim_cur = 4 << 10;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    disk_full_ = true;
  }
  void AllowWrites() {
    ::setrlimit(RLIMIT_FSIZE, &limit_);
    std::signal(SIGXFSZ, old_handler_);
    disk_full_ = false;
  }

  fs::path dir_;
  bool disk_full_ = false;
  struct rlimit limit_ {};
  void (*old_handler_)(int) = SIG_DFL;
};

// Issue 24, defect 4: BeforeAdd failed with another checkpoint queued, and
// its end began that one inside the add; the add then overwrote the new
// snapshot's oldest rows before they were written, and the checkpoint held
// the add's rows under the old keys. Here the appends go round the ring's
// slots in one pass, and the one that first overwrites a step the first
// checkpoint has not written fails to keep it (the disk is full): the
// queued checkpoint must begin after that append, between operations.
TEST_F(CheckpointServiceTest, ACheckpointQueuedBehindOneThatFailsInAnAddBeginsAfterTheAdd) {
  for (int64_t b = 0; b < kCapacity / kBatch; ++b) PushAdd(kActor, b + 1, kBatch, Columns(b * kBatch));
  Step();
  ASSERT_EQ(items().size(), kCapacity);
  transport_->outbox(kActor).clear();
  ASSERT_TRUE(service_->RequestCheckpoint("the first").ok());
  ASSERT_TRUE(service_->checkpoints()->active());
  ASSERT_TRUE(service_->RequestCheckpoint("the second, queued").ok());
  FillDisk();
  // Up to the first add whose steps take the slot of key 0, which the first
  // checkpoint must write first.
  const int64_t slots = replay_->steps().slots();
  ASSERT_EQ(slots % kBatch, 0);
  const int64_t adds = (slots - kCapacity) / kBatch + 1;
  for (int64_t b = 0; b < adds; ++b) {
    PushAdd(kActor, 100 + b, kBatch, Columns(kCapacity + b * kBatch));
  }
  Step();
  for (int64_t b = 0; b < adds; ++b) Reply(kActor, MessageKind::kAddReply, 100 + b);
  EXPECT_FALSE(disk_full_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // fsyncs on a helper thread
  while ((service_->checkpoints()->active() || service_->checkpoints()->last_path().empty()) &&
         std::chrono::steady_clock::now() < deadline) {
    Step();
  }
  ASSERT_FALSE(service_->checkpoints()->last_path().empty()) << "the second checkpoint was not written";
  for (int pass = 0; pass < 4; ++pass) Step();
  EXPECT_FALSE(service_->checkpoints()->active());
  // The first failed (its partial removed): the second took its number.
  EXPECT_EQ(service_->checkpoints()->last_path(), (dir_ / "shard-0-of-1" / "checkpoint-000000").string())
      << "the first checkpoint did not fail";

  replay::step_test::StepFixture restored;
  ASSERT_TRUE(replay::step_test::MakeTransitionReplay(PayloadSchema(), kCapacity, 1, &restored).ok());
  CheckpointState state;
  std::string loaded;
  const Status load = LoadCheckpoint(dir_.string(), 0, 1, restored.steps.get(), &state, &loaded);
  ASSERT_TRUE(load.ok()) << load.ToString();
  ASSERT_EQ(restored.items->size(), kCapacity);
  EXPECT_EQ(restored.items->next_key(), static_cast<uint64_t>(kCapacity + adds * kBatch));
  for (int64_t slot = 0; slot < restored.items->slots_used(); ++slot) {
    const uint64_t key = restored.items->KeyAt(slot);
    std::vector<std::byte> row(static_cast<size_t>(restored.steps->SampleItemBytes()));
    restored.steps->Assemble(std::span<const int64_t>(&slot, 1), row);
    int64_t id = -1;
    std::memcpy(&id, row.data(), sizeof(id));
    EXPECT_EQ(id, static_cast<int64_t>(key)) << "the checkpoint holds another item under key " << key;
    EXPECT_EQ(row[sizeof(id) + kPayload / 2], static_cast<std::byte>(static_cast<uint8_t>(key)));
  }
}

// Found by the simulation (seeds 19 and 71): a checkpoint request still
// waiting when its client closed was answered after the close reply (or,
// the job ending, never). The close reply comes after everything sent before
// it: the request is answered first, and the checkpoint goes on.
TEST_F(CheckpointServiceTest, ACloseAnswersTheClientsWaitingCheckpointRequestFirst) {
  PushAdd(kActor, 1, kBatch, Columns(0));
  Step();
  Reply(kActor, MessageKind::kAddReply, 1);
  ASSERT_TRUE(service_->RequestCheckpoint("one being written").ok());
  transport_->Push(kActor, Frame(MessageKind::kCheckpointRequest, 2, proto::Empty{}));  // waits for the next
  transport_->Push(kActor, Frame(MessageKind::kCloseRequest, 3, proto::Empty{}));
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 2).code(), Status::Code::kFailedPrecondition);
  Reply(kActor, MessageKind::kCloseReply, 3);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // fsyncs on a helper thread
  while (service_->checkpoints()->active() && std::chrono::steady_clock::now() < deadline) Step();
  for (int pass = 0; pass < 8; ++pass) Step();  // the next checkpoint, asked for by the closed client
  EXPECT_TRUE(transport_->outbox(kActor).empty()) << "a reply after the close reply";
  EXPECT_FALSE(service_->checkpoints()->last_path().empty());
}

}  // namespace
}  // namespace perserve::service
