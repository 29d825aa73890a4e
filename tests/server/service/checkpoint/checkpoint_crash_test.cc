// Checkpoints over the in-memory file system (memory_file_system.h): the
// same files as on the real one, and a crash at any operation of a
// checkpoint (every one in turn: each create, write, fsync, directory
// fsync, rename and removal; of the machine, which loses what was not
// synced, or of the process alone) leaves a directory that restores the
// previous complete checkpoint or the new one, whole, or, when none was
// complete, says there is none; once the writer has said the new one is
// complete, a crash keeps it, and so does a crash after a restore of it.
// And the writer after the crash goes on from there.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/service/checkpoint/checkpoint_test_util.h"
#include "server/service/checkpoint/memory_file_system.h"

namespace perserve::service {
namespace {

using namespace checkpoint_test;

constexpr char kRoot[] = "/ckpt";
constexpr char kShard[] = "/ckpt/shard-0-of-1";
// Rows of 12 kB in a ring of 100: the obs column of a checkpoint is 1.2 MB,
// more than a slice (1 MiB): two writes.
constexpr int64_t kCapacity = 100, kObsBytes = 12000;

std::unique_ptr<replay::StepReplay> Replay() { return MakeReplay(kCapacity, 17, 0.6, kObsBytes); }

Status RestoreFrom(MemoryFileSystem* memory, replay::StepReplay* into, std::string* loaded) {
  CheckpointState state;
  return LoadCheckpoint(kRoot, 0, 1, into, &state, loaded, memory);
}

TEST_F(CheckpointTest, InMemoryACheckpointIsTheFilesThePosixFileSystemHolds) {
  auto replay = Replay();
  AddItems(replay.get(), 0, 130, &rng_);  // the ring wrapped
  CheckpointWriter posix(dir_.string(), 0, 1);
  ASSERT_TRUE(Write(&posix, replay.get()).ok());
  MemoryFileSystem memory;
  CheckpointWriter in_memory(kRoot, 0, 1, 0, &memory);
  ASSERT_TRUE(Write(&in_memory, replay.get()).ok());
  EXPECT_EQ(in_memory.last_path(), std::string(kShard) + "/checkpoint-000000");

  const fs::path written = dir_ / "shard-0-of-1" / "checkpoint-000000";
  std::vector<std::string> names, posix_names;
  ASSERT_TRUE(memory.ListDirectory(in_memory.last_path(), &names).ok());
  for (const auto& entry : fs::directory_iterator(written)) posix_names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  std::sort(posix_names.begin(), posix_names.end());
  EXPECT_EQ(names, posix_names);
  for (const std::string& name : posix_names) {
    EXPECT_TRUE(memory.Contents(in_memory.last_path() + "/" + name) == ReadFile(written / name)) << name << " differs";
  }
  auto restored = Replay();
  std::string loaded;
  const Status status = RestoreFrom(&memory, restored.get(), &loaded);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(loaded, in_memory.last_path());
  ExpectSameTable(*restored, *replay);
}

// One run of the sweep: a replay, maybe a complete checkpoint of it, more
// adds, and a checkpoint of that during which the machine crashes before
// operation `crash_at` of it (past its last: a crash once it is complete).
class CrashSweep {
 public:
  using CrashKind = MemoryFileSystem::CrashKind;
  CrashSweep(bool previous, CrashKind kind, uint64_t seed) : previous_(previous), kind_(kind), memory_(seed) {}

  // Writes up to the checkpoint the crash comes in; *operations: how many it took (when it was whole).
  void Run(int64_t crash_at, int64_t* operations = nullptr) {
    replay_ = Replay();
    std::mt19937_64 rng(5);
    AddItems(replay_.get(), 0, 60, &rng);
    if (previous_) {
      CheckpointWriter writer(kRoot, 0, 1, 0, &memory_);
      const Status written = Write(&writer, replay_.get());
      ASSERT_TRUE(written.ok()) << written.ToString();
      previous_path_ = writer.last_path();
      previous_items_ = HeldItems(*replay_);
    }
    AddItems(replay_.get(), 60, 70, &rng);  // the ring wraps: every row differs
    new_items_ = HeldItems(*replay_);
    new_path_ = fmt::format("{}/checkpoint-{:06}", kShard, previous_ ? 1 : 0);
    first_operation_ = memory_.operations();
    if (crash_at > 0) memory_.CrashBeforeOperation(crash_at, kind_);
    {
      CheckpointWriter writer(kRoot, 0, 1, 0, &memory_);
      completed_ = Write(&writer, replay_.get()).ok();
    }  // the writer's end (Abandon) meets a dead machine: it changes nothing
    if (operations != nullptr) *operations = memory_.operations() - first_operation_;
    const std::vector<std::string> log = memory_.operation_log();
    const size_t at = static_cast<size_t>(first_operation_ + crash_at - 1);
    where_ = fmt::format("{} previous checkpoint, a crash of the {} before operation {} ({})", previous_ ? "a" : "no",
                         kind_ == CrashKind::kMachine ? "machine" : "process", crash_at,
                         memory_.down() && at < log.size() ? log[at] : "after the checkpoint was complete");
  }

  // What the crash came before.
  const std::string& Where() const { return where_; }

  // Crashes (if the schedule did not), restarts, and checks what restores.
  void CheckRestore() {
    if (!memory_.down() && kind_ == CrashKind::kMachine) memory_.Crash();
    memory_.Restart();
    auto restored = Replay();
    std::string loaded;
    const Status status = RestoreFrom(&memory_, restored.get(), &loaded);
    if (!status.ok()) {
      EXPECT_FALSE(previous_) << Where() << ": the previous checkpoint was lost: " << status.ToString();
      EXPECT_FALSE(completed_) << Where() << ": the checkpoint said complete was lost: " << status.ToString();
      const bool none = status.code() == Status::Code::kNotFound ||
                        (status.code() == Status::Code::kFailedPrecondition &&
                         status.message().find("holds only a partial checkpoint") != std::string::npos);
      EXPECT_TRUE(none) << Where() << ": not \"no checkpoint\": " << status.ToString();
      return;
    }
    if (loaded == new_path_) {
      EXPECT_TRUE(HeldItems(*restored) == new_items_) << Where() << ": " << loaded << " holds other items";
    } else {
      EXPECT_EQ(loaded, previous_path_) << Where() << ": restored neither checkpoint";
      EXPECT_FALSE(completed_) << Where() << ": the checkpoint said complete was lost: " << loaded << " restored";
      EXPECT_TRUE(HeldItems(*restored) == previous_items_) << Where() << ": " << loaded << " holds other items";
    }
    // What a restore served stays: the machine crashing after it restores
    // it again. (A process that died between the rename that made the new
    // one complete and its directory's fsync left it complete but not
    // durable: the restore makes it so. Found by the simulation.)
    memory_.Crash();
    auto again = Replay();
    std::string reloaded;
    const Status second = RestoreFrom(&memory_, again.get(), &reloaded);
    EXPECT_TRUE(second.ok() && reloaded == loaded)
        << Where() << ": restored " << loaded << ", then after a crash of the machine "
        << (second.ok() ? reloaded : second.ToString());
  }

  // After the crash a writer (the server started again) writes the next
  // checkpoint, which restores.
  void CheckNextCheckpoint() {
    CheckpointWriter writer(kRoot, 0, 1, 0, &memory_);
    const Status written = Write(&writer, replay_.get());
    ASSERT_TRUE(written.ok()) << Where() << ": the next checkpoint: " << written.ToString();
    auto restored = Replay();
    std::string loaded;
    const Status status = RestoreFrom(&memory_, restored.get(), &loaded);
    ASSERT_TRUE(status.ok()) << Where() << ": the next checkpoint: " << status.ToString();
    EXPECT_EQ(loaded, writer.last_path()) << Where();
    EXPECT_TRUE(HeldItems(*restored) == new_items_) << Where() << ": the next checkpoint holds other items";
    std::vector<std::string> names;
    ASSERT_TRUE(memory_.ListDirectory(kShard, &names).ok());
    EXPECT_EQ(names, std::vector<std::string>{fs::path(writer.last_path()).filename().string()})
        << Where() << ": a partial or an older checkpoint is left";
  }

 private:
  bool previous_;
  CrashKind kind_;
  MemoryFileSystem memory_;
  std::unique_ptr<replay::StepReplay> replay_;
  std::string previous_path_, new_path_;
  std::vector<HeldItem> previous_items_, new_items_;
  int64_t first_operation_ = 0;
  std::string where_;
  bool completed_ = false;
};

class CheckpointCrashTest : public ::testing::TestWithParam<bool> {};

TEST_P(CheckpointCrashTest, ACrashAtAnyOperationRestoresThePreviousCheckpointOrTheNewOneWhole) {
  const bool previous = GetParam();
  using CrashKind = CrashSweep::CrashKind;
  int64_t operations = 0;
  {
    CrashSweep whole(previous, CrashKind::kMachine, 1);
    whole.Run(0, &operations);
  }
  ASSERT_GT(operations, 20) << "a checkpoint of 11 files takes more operations than that";
  // A machine's crash at each point under a few seeds (what it keeps of
  // unsynced bytes is drawn from it), then the process's (nothing drawn).
  for (const auto& [kind, seeds] : {std::pair{CrashKind::kMachine, 3}, std::pair{CrashKind::kProcess, 1}}) {
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
      for (int64_t k = 1; k <= operations + 1; ++k) {
        CrashSweep sweep(previous, kind, seed * 1000 + static_cast<uint64_t>(k));
        sweep.Run(k);
        sweep.CheckRestore();
        sweep.CheckNextCheckpoint();
        if (::testing::Test::HasFailure()) return;  // the first case that fails tells it all
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutAPreviousCheckpoint, CheckpointCrashTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AfterACompleteOne" : "TheFirst";
                         });

}  // namespace
}  // namespace perserve::service
