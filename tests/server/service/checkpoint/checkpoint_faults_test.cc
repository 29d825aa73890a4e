// A disk's faults, injected by the in-memory file system
// (memory_file_system.h), in a checkpoint's writing: each failing operation
// (a write's EIO, a full disk, a file's or a directory's fsync, a create, a
// rename) fails the checkpoint with a status naming the operation and the
// path, removes its partial directory and keeps the previous checkpoint;
// once the fault is gone the next one is complete. Short writes are no
// fault: the checkpoint writes the rest. The same through the
// CheckpointDriver and a ReplayService, which keeps serving.
#include <cerrno>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/service/checkpoint/checkpoint_test_util.h"
#include "server/service/checkpoint/memory_file_system.h"
#include "server/service/service_test_util.h"
#include "service/checkpoint/checkpoint_driver.h"

namespace perserve::service {
namespace {

using namespace checkpoint_test;
using Operation = MemoryFileSystem::Operation;

constexpr char kRoot[] = "/ckpt";
constexpr char kPartial[] = "/ckpt/shard-0-of-1/checkpoint-000001.partial";
constexpr char kSecond[] = "/ckpt/shard-0-of-1/checkpoint-000001";
constexpr int64_t kCapacity = 100, kObsBytes = 25000;  // an obs column of several writes

std::unique_ptr<replay::StepReplay> Replay() { return MakeReplay(kCapacity, 17, 0.6, kObsBytes); }

Status RestoreFrom(MemoryFileSystem* memory, replay::StepReplay* into, std::string* loaded) {
  CheckpointState state;
  return LoadCheckpoint(kRoot, 0, 1, into, &state, loaded, memory);
}

struct Fault {
  std::string name;
  std::function<void(MemoryFileSystem*)> inject;
  Status::Code code;
  std::string message;  // the status's whole message, or (ending in "/") its beginning
  std::string ending = "";  // then its end
};

std::vector<Fault> Faults() {
  const std::string partial = kPartial;
  return {
      {"WriteError", [](MemoryFileSystem* m) { m->FailNth(Operation::kWrite, 3, EIO); }, Status::Code::kUnavailable,
       "write " + partial + "/", ": Input/output error"},
      {"FullDisk", [](MemoryFileSystem* m) { m->FillDiskAfter(1 << 20); }, Status::Code::kResourceExhausted,
       "write " + partial + "/", ": No space left on device"},
      {"FileSyncError", [](MemoryFileSystem* m) { m->FailNth(Operation::kSync, 2, EIO); }, Status::Code::kUnavailable,
       "fsync " + partial + "/steps.bin: Input/output error"},
      {"DirectorySyncError", [](MemoryFileSystem* m) { m->FailNth(Operation::kSyncDirectory, 1, EIO); },
       Status::Code::kUnavailable, "fsync " + partial + ": Input/output error"},
      // Found by CheckpointRandomFaultsTest: this one failed after the rename,
      // and the checkpoint said failed was restored.
      {"ShardDirectorySyncError", [](MemoryFileSystem* m) { m->FailNth(Operation::kSyncDirectory, 2, EIO); },
       Status::Code::kUnavailable, "fsync /ckpt/shard-0-of-1: Input/output error"},
      {"CreateError", [](MemoryFileSystem* m) { m->FailNth(Operation::kCreateFile, 2, EACCES); },
       Status::Code::kUnavailable, "create " + partial + "/steps.bin: Permission denied"},
      {"ManifestCreateError",
       [](MemoryFileSystem* m) {
         m->FailNth(Operation::kCreateFile, 12, ENOSPC);  // 11 parts, then the MANIFEST
       },
       Status::Code::kResourceExhausted, "create " + partial + "/MANIFEST: No space left on device"},
      {"RenameError", [](MemoryFileSystem* m) { m->FailNth(Operation::kRename, 1, EACCES); },
       Status::Code::kUnavailable, fmt::format("rename {} to {}: Permission denied", partial, kSecond)},
  };
}

void ExpectFault(const Fault& fault, const Status& status) {
  EXPECT_EQ(status.code(), fault.code) << status.ToString();
  if (fault.message.ends_with("/")) {
    EXPECT_TRUE(status.message().starts_with(fault.message) && status.message().ends_with(fault.ending))
        << status.ToString();
  } else {
    EXPECT_EQ(status.message(), fault.message);
  }
}

class CheckpointFaultTest : public ::testing::TestWithParam<Fault> {
 protected:
  // A complete checkpoint of 60 items, then 70 more (the ring wrapped).
  void SetUp() override {
    replay_ = Replay();
    AddItems(replay_.get(), 0, 60, &rng_);
    CheckpointWriter writer(kRoot, 0, 1, 0, &memory_);
    ASSERT_TRUE(Write(&writer, replay_.get()).ok());
    first_ = writer.last_path();
    first_items_ = HeldItems(*replay_);
    AddItems(replay_.get(), 60, 70, &rng_);
  }
  // What restores: `path`, holding `items`.
  void ExpectRestores(const std::string& path, const std::vector<HeldItem>& items) {
    auto restored = Replay();
    std::string loaded;
    const Status status = RestoreFrom(&memory_, restored.get(), &loaded);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(loaded, path);
    EXPECT_TRUE(HeldItems(*restored) == items) << loaded << " holds other items";
  }

  MemoryFileSystem memory_{7};
  std::mt19937_64 rng_{5};
  std::unique_ptr<replay::StepReplay> replay_;
  std::string first_;
  std::vector<HeldItem> first_items_;
};

TEST_P(CheckpointFaultTest, FailsTheCheckpointNamingItKeepsThePreviousAndTheNextSucceeds) {
  const Fault& fault = GetParam();
  CheckpointWriter writer(kRoot, 0, 1, 0, &memory_);
  fault.inject(&memory_);
  const Status failed = Write(&writer, replay_.get());
  ExpectFault(fault, failed);
  EXPECT_FALSE(writer.active());
  EXPECT_EQ(writer.last_path(), first_);
  EXPECT_FALSE(memory_.Exists(kPartial)) << "the partial directory is removed";
  EXPECT_FALSE(memory_.Exists(kSecond)) << "a checkpoint that failed is never left complete";
  ExpectRestores(first_, first_items_);

  memory_.ClearFaults();
  const Status written = Write(&writer, replay_.get());
  ASSERT_TRUE(written.ok()) << written.ToString();
  EXPECT_EQ(writer.last_path(), kSecond);
  EXPECT_FALSE(memory_.Exists(first_)) << "the older one goes once the new one is complete";
  ExpectRestores(kSecond, HeldItems(*replay_));
}

INSTANTIATE_TEST_SUITE_P(EachFault, CheckpointFaultTest, ::testing::ValuesIn(Faults()),
                         [](const ::testing::TestParamInfo<Fault>& info) { return info.param.name; });

TEST(CheckpointShortWritesTest, AreCompletedAndTheCheckpointRestoresBitExact) {
  auto replay = Replay();
  std::mt19937_64 rng(5);
  AddItems(replay.get(), 0, 130, &rng);
  MemoryFileSystem memory(11);
  memory.SetFaultRates({.short_write = 0.7});
  CheckpointWriter writer(kRoot, 0, 1, 0, &memory);
  const Status written = Write(&writer, replay.get());
  ASSERT_TRUE(written.ok()) << written.ToString();
  auto restored = Replay();
  std::string loaded;
  const Status status = RestoreFrom(&memory, restored.get(), &loaded);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectSameTable(*restored, *replay);
}

// A file system that answers nothing (a dead disk: every call EIO, no path
// exists, not even the root) fails the checkpoint at once. Found by the
// simulation's crash-restarts: Begin walked up from the shard directory to
// the first that exists, and the root, its own parent, never did.
TEST(CheckpointDeadDiskTest, FailsTheCheckpointAtOnce) {
  auto replay = Replay();
  std::mt19937_64 rng(5);
  AddItems(replay.get(), 0, 30, &rng);
  MemoryFileSystem memory(11);
  memory.CrashNow(MemoryFileSystem::CrashKind::kProcess);
  CheckpointWriter writer(kRoot, 0, 1, 0, &memory);
  const Status written = Write(&writer, replay.get());
  EXPECT_FALSE(written.ok());
  EXPECT_FALSE(writer.active());
}

// Faults at random (write, fsync and rename errors, short writes): every
// checkpoint either completes and restores what it began with, or fails
// and the last complete one restores.
TEST(CheckpointRandomFaultsTest, EveryCheckpointCompletesWholeOrFailsAndKeepsTheLastComplete) {
  auto replay = Replay();
  std::mt19937_64 rng(5);
  MemoryFileSystem memory(13);
  memory.SetFaultRates({.short_write = 0.3, .write_error = 0.02, .sync_error = 0.02, .rename_error = 0.05});
  CheckpointWriter writer(kRoot, 0, 1, 0, &memory);
  std::vector<HeldItem> last_items;
  int completed = 0, failed = 0;
  for (int round = 0; round < 40; ++round) {
    AddItems(replay.get(), round * 20, 20, &rng);
    const Status written = Write(&writer, replay.get());
    if (written.ok()) {
      last_items = HeldItems(*replay);
      ++completed;
    } else {
      ++failed;
      EXPECT_TRUE(written.message().find(kRoot) != std::string::npos) << written.ToString();
    }
    if (completed == 0) continue;
    auto restored = Replay();
    std::string loaded;
    const Status status = RestoreFrom(&memory, restored.get(), &loaded);
    ASSERT_TRUE(status.ok()) << "round " << round << ": " << status.ToString();
    EXPECT_EQ(loaded, writer.last_path());
    ASSERT_TRUE(HeldItems(*restored) == last_items) << "round " << round;
  }
  EXPECT_GT(completed, 5);
  EXPECT_GT(failed, 5);
}

// The driver answers the request a fault failed with its status, and the next one with the checkpoint.
TEST(CheckpointDriverFaultTest, AnswersTheFaultAndTheNextCheckpointCompletes) {
  auto replay = Replay();
  std::mt19937_64 rng(5);
  AddItems(replay.get(), 0, 130, &rng);
  MemoryFileSystem memory;
  std::vector<Status> answers;
  CheckpointDriverOptions options{kRoot, 0, 1, 0.0, std::chrono::microseconds(1)};
  options.file_system = &memory;
  const auto answer = [&](int, uint64_t, const Status& result) { answers.push_back(result); };
  CheckpointDriver driver(replay.get(), options, CheckpointDriver::Hooks{[] { return StateOf(); }, answer, [] {}});
  memory.FailNth(Operation::kSync, 1, EIO);
  for (const int round : {0, 1}) {
    driver.AddWaiter(1, 10 + round);
    ASSERT_TRUE(driver.Request("asked").ok());
    for (int pass = 0; pass < 100000 && answers.size() == static_cast<size_t>(round); ++pass) {
      driver.Step(false);
      if (driver.writer()->active()) driver.writer()->AwaitFinish();
    }
    ASSERT_EQ(answers.size(), static_cast<size_t>(round + 1));
  }
  EXPECT_EQ(answers[0].ToString(),
            "UNAVAILABLE: fsync /ckpt/shard-0-of-1/checkpoint-000000.partial/state.bin: Input/output error");
  EXPECT_TRUE(answers[1].ok()) << answers[1].ToString();
  EXPECT_EQ(driver.writer()->last_path(), "/ckpt/shard-0-of-1/checkpoint-000000");
}

// Over the loopback transport: the learner's checkpoint request is answered
// with the fault, the adds around it are served, and the next request gets
// a complete checkpoint that holds them.
class ServiceFaultTest : public service_test::ServiceFixture {};

TEST_F(ServiceFaultTest, TheServiceAnswersTheFaultKeepsServingAndTheNextCheckpointCompletes) {
  MemoryFileSystem memory;
  ServiceOptions options = Options(1);
  options.checkpoint_dir = kRoot;
  options.checkpoint_file_system = &memory;
  const Schema schema{{{"id", DType::kInt64, {}}}};
  Start(1, 64, schema, options);
  const auto ids = [](int64_t first) {
    std::vector<int64_t> values{first, first + 1, first + 2, first + 3};
    return std::vector<std::byte>(std::as_bytes(std::span(values)).begin(), std::as_bytes(std::span(values)).end());
  };
  const auto serve = [&] {
    for (int pass = 0; pass < 1000 && transport_->outbox(0).empty(); ++pass) {
      Step();
      if (service_->checkpoints()->active()) service_->checkpoints()->AwaitFinish();
    }
  };
  PushAdd(0, 1, 4, ids(0));
  Step();
  Added(0, 1);
  memory.FillDiskAfter(10);
  transport_->Push(0, service_test::Frame(proto::MessageKind::kCheckpointRequest, 2, proto::Empty{}));
  serve();
  const Status full = ErrorStatus(0, 2);
  EXPECT_EQ(full.code(), Status::Code::kResourceExhausted);
  EXPECT_TRUE(full.message().starts_with("write /ckpt/shard-0-of-1/checkpoint-000000.partial/")) << full.ToString();
  PushAdd(0, 3, 4, ids(4));
  Step();
  EXPECT_EQ(Added(0, 3).first_key, 4u) << "the service serves on";

  memory.ClearFaults();
  transport_->Push(0, service_test::Frame(proto::MessageKind::kCheckpointRequest, 4, proto::Empty{}));
  serve();
  proto::CheckpointReply reply;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, proto::MessageKind::kCheckpointReply, 4), &reply).ok());
  EXPECT_EQ(reply.path, "/ckpt/shard-0-of-1/checkpoint-000000");
  replay::step_test::StepFixture restored;
  ASSERT_TRUE(replay::step_test::MakeTransitionReplay(schema, 64, 1, &restored).ok());
  CheckpointState state;
  std::string loaded;
  const Status load = LoadCheckpoint(kRoot, 0, 1, restored.steps.get(), &state, &loaded, &memory);
  ASSERT_TRUE(load.ok()) << load.ToString();
  EXPECT_EQ(restored.items->size(), 8);
}

}  // namespace
}  // namespace perserve::service
