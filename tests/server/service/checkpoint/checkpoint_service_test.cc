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

#include "server/service/service_test_util.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service {
namespace {

namespace fs = std::filesystem;
using proto::MessageKind;
using service_test::Frame;

constexpr int kActor = 0;
constexpr int64_t kCapacity = 64, kBatch = 8, kPayload = 1024;

Schema PayloadSchema() { return Schema{{{"id", DType::kInt64, {}}, {"payload", DType::kUInt8, {kPayload}}}}; }

// Items first_id ..: each row's id, its payload bytes derived from it.
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_id) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> payload;
  for (int64_t i = 0; i < kBatch; ++i) {
    ids.push_back(first_id + i);
    payload.insert(payload.end(), kPayload, static_cast<uint8_t>(first_id + i));
  }
  return service_test::Frame(MessageKind::kAddRequest, request_id, proto::AddRequest{kBatch, false},
                             {std::as_bytes(std::span(ids)), std::as_bytes(std::span(payload))});
}

class CheckpointServiceTest : public service_test::ServiceFixture {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("perserve-checkpoint-service-test-{}", ::getpid());
    fs::remove_all(dir_);
    ServiceOptions options = Options(1);
    options.checkpoint_dir = dir_.string();
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
  // disk): the small state still fits, a column of 8 rows does not.
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
// the add's rows under the old keys.
TEST_F(CheckpointServiceTest, ACheckpointQueuedBehindOneThatFailsInAnAddBeginsAfterTheAdd) {
  for (int64_t b = 0; b < kCapacity / kBatch; ++b) transport_->Push(kActor, AddFrame(b + 1, b * kBatch));
  for (int pass = 0; pass < 4; ++pass) Step();
  ASSERT_EQ(replay_->size(), kCapacity);
  transport_->outbox(kActor).clear();
  ASSERT_TRUE(service_->RequestCheckpoint("the first").ok());
  ASSERT_TRUE(service_->checkpoints()->active());
  ASSERT_TRUE(service_->RequestCheckpoint("the second, queued").ok());
  FillDisk();
  transport_->Push(kActor, AddFrame(100, kCapacity));  // overwrites keys 0..7: the first checkpoint must write them
  Step();
  Reply(kActor, MessageKind::kAddReply, 100);
  EXPECT_FALSE(disk_full_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // fsyncs on a helper thread
  while (service_->checkpoints()->last_path().empty() && std::chrono::steady_clock::now() < deadline) Step();
  ASSERT_FALSE(service_->checkpoints()->last_path().empty()) << "the second checkpoint was not written";

  std::unique_ptr<replay::Replay> restored;
  ASSERT_TRUE(replay::Replay::Create(replay::ReplayOptions{kCapacity, 1.0, tree::Device::kCpu, 11}, PayloadSchema(),
                                     &restored)
                  .ok());
  CheckpointState state;
  std::string loaded;
  const Status load = LoadCheckpoint(dir_.string(), 0, 1, restored.get(), &state, &loaded);
  ASSERT_TRUE(load.ok()) << load.ToString();
  ASSERT_EQ(restored->size(), kCapacity);
  for (uint64_t key = restored->oldest_key(); key < restored->next_key(); ++key) {
    int64_t id = -1;
    std::memcpy(&id, restored->store().Rows(0, static_cast<int64_t>(key % kCapacity), 1).data(), sizeof(id));
    EXPECT_EQ(id, static_cast<int64_t>(key)) << "the checkpoint holds another item under key " << key;
  }
}

// Found by the simulation (seeds 19 and 71): a checkpoint request still
// waiting when its client closed was answered after the close reply (or,
// the job ending, never). The close reply comes after everything sent before
// it: the request is answered first, and the checkpoint goes on.
TEST_F(CheckpointServiceTest, ACloseAnswersTheClientsWaitingCheckpointRequestFirst) {
  transport_->Push(kActor, AddFrame(1, 0));
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
