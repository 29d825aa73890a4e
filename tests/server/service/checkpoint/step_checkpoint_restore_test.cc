// Restoring a damaged or mismatched step checkpoint: every step field is
// checked before the replay serves, each failure a clear error naming the
// file and the field (forged parts have their MANIFEST lines made to match,
// so the checks behind the hashes are reached).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <cereal/archives/binary.hpp>
#include <gtest/gtest.h>

#include "proto/bounded_input_archive.h"
#include "server/service/checkpoint/step_checkpoint_test_util.h"

namespace perserve::service {
namespace {

using namespace step_checkpoint_test;
using checkpoint_test::CheckpointTest;
using checkpoint_test::ForgePart;
using checkpoint_test::ReadFile;
namespace fs = std::filesystem;

class StepCheckpointRestoreTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    StepFixture original = MakeFixture(NStepOptions(40), StepSchema(), 30);
    Driver driver(3);
    for (int i = 0; i < 120; ++i) driver.Round(&original);
    CheckpointWriter writer(dir_.string(), 0, 1, 30);
    ASSERT_TRUE(WriteCheckpoint(&writer, &original).ok());
    path_ = writer.last_path();
  }

  Status Load(const StepOptions& options = NStepOptions(40)) {
    StepFixture fixture = MakeFixture(options, StepSchema(), 30);
    return Restore(path_, &fixture);
  }

  // Asserts the restore fails with `code` and a message holding each of `parts`.
  void ExpectRefused(Status::Code code, std::initializer_list<std::string> parts,
                     const StepOptions& options = NStepOptions(40)) {
    const Status status = Load(options);
    ASSERT_EQ(status.code(), code) << status.ToString();
    for (const std::string& part : parts) EXPECT_NE(status.message().find(part), std::string::npos) << status.ToString();
  }

  StepCheckpointState State() const {
    const std::string bytes = ReadFile(fs::path(path_) / kStepStateFile);
    proto::BoundedInputArchive archive(std::as_bytes(std::span(bytes.data(), bytes.size())));
    StepCheckpointState state;
    archive(state);
    return state;
  }
  void ForgeState(const StepCheckpointState& state) {
    std::ostringstream bytes;
    {
      cereal::BinaryOutputArchive archive(bytes);
      archive(state);
    }
    ForgePart(path_, kStepStateFile, bytes.str());
  }
  // step-info.bin's int64 at `index` (3 a step: stream, index, episode start) set to `value`.
  void ForgeInfo(size_t index, int64_t value) {
    std::string bytes = ReadFile(fs::path(path_) / kStepInfoFile);
    std::memcpy(bytes.data() + index * sizeof(int64_t), &value, sizeof(value));
    ForgePart(path_, kStepInfoFile, bytes);
  }
  // The newest held step that is not its stream's first held one.
  size_t LaterStep() const {
    const size_t held = ReadFile(fs::path(path_) / kStepInfoFile).size() / kStepInfoBytes;
    for (size_t i = held - 1; i > 0; --i) {
      for (size_t j = 0; j < i; ++j) {
        if (Info(3 * j) == Info(3 * i)) return i;
      }
    }
    ADD_FAILURE() << "no stream holds two steps";
    return 0;
  }
  int64_t Info(size_t index) const {
    const std::string bytes = ReadFile(fs::path(path_) / kStepInfoFile);
    int64_t value = 0;
    std::memcpy(&value, bytes.data() + index * sizeof(int64_t), sizeof(value));
    return value;
  }

  std::string path_;
};

TEST_F(StepCheckpointRestoreTest, TheUndamagedCheckpointRestores) {
  const Status status = Load();
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST_F(StepCheckpointRestoreTest, OtherStepFlagsAreRefusedNamingBothValues) {
  StepOptions options = NStepOptions(40);
  options.n_step = 2;
  ExpectRefused(Status::Code::kFailedPrecondition, {"table default was written with n_step=3", "this server's table default has n_step=2"}, options);
  options = NStepOptions(40);
  options.discount = 0.99;
  ExpectRefused(Status::Code::kFailedPrecondition, {"discount=0.9;", "discount=0.99"}, options);
  options = NStepOptions(40);
  options.stacks = {{"obs", 4}};
  ExpectRefused(Status::Code::kFailedPrecondition, {"stack=obs:3", "stack=obs:4"}, options);
  ExpectRefused(Status::Code::kFailedPrecondition, {"kind=n_step", "kind=sequence"},
                SequenceOptions(40));
}

// A table of transitions of the same steps: its flags say so.
TEST_F(StepCheckpointRestoreTest, AServerOfTransitionsRefusesIt) {
  StepOptions transitions;
  transitions.kind = StepOptions::Kind::kTransition;
  transitions.step_capacity = 40;
  transitions.streams = 3;
  ExpectRefused(Status::Code::kFailedPrecondition, {"written with kind=n_step; this server's table default has kind=transition"},
                transitions);
}

TEST_F(StepCheckpointRestoreTest, AnotherItemCapacityIsRefused) {
  StepFixture fixture = MakeFixture(NStepOptions(40), StepSchema(), 31);
  const Status status = Restore(path_, &fixture);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("max_items=30; this server's table default has max_items=31"), std::string::npos)
      << status.ToString();
}

TEST_F(StepCheckpointRestoreTest, StreamCountsThatDoNotSumToTheNextKeyAreRefused) {
  StepCheckpointState state = State();
  state.stream_steps[1] += 1;
  ForgeState(state);
  ExpectRefused(Status::Code::kInvalidArgument, {"steps.bin: streams", "sum to"});
}

TEST_F(StepCheckpointRestoreTest, AnEpisodeStartPastTheStreamIsRefused) {
  StepCheckpointState state = State();
  state.next_episode_start[0] = state.stream_steps[0] + 1;
  ForgeState(state);
  ExpectRefused(Status::Code::kInvalidArgument, {"steps.bin: streams", "stream 0"});
}

TEST_F(StepCheckpointRestoreTest, ANextEpisodeStartTheDoneFlagsContradictIsRefused) {
  StepCheckpointState state = State();
  state.next_episode_start[2] = state.next_episode_start[2] == 0 ? 1 : state.next_episode_start[2] - 1;
  ForgeState(state);
  ExpectRefused(Status::Code::kInvalidArgument, {"steps.bin", "stream 2's next episode starts"});
}

TEST_F(StepCheckpointRestoreTest, AStateThatDoesNotDecodeIsRefused) {
  ForgePart(path_, kStepStateFile, std::string(5, '\x7f'));
  ExpectRefused(Status::Code::kInvalidArgument, {"steps.bin does not decode"});
}

TEST_F(StepCheckpointRestoreTest, AStreamOutOfRangeIsRefused) {
  ForgeInfo(3 * 5, 7);
  ExpectRefused(Status::Code::kInvalidArgument, {"step-info.bin: step key", "stream 7 is outside [0, 3)"});
}

TEST_F(StepCheckpointRestoreTest, AWrongIndexIsRefused) {
  const size_t step = LaterStep();
  ForgeInfo(3 * step + 1, Info(3 * step + 1) + 1);
  ExpectRefused(Status::Code::kInvalidArgument, {"step-info.bin: step key", "index"});
}

TEST_F(StepCheckpointRestoreTest, AnEpisodeStartTheDoneFlagsContradictIsRefused) {
  const size_t step = LaterStep();
  ForgeInfo(3 * step + 2, Info(3 * step + 2) + 1);
  ExpectRefused(Status::Code::kInvalidArgument, {"step-info.bin: step key", "done flags give"});
}

TEST_F(StepCheckpointRestoreTest, ADoneFlagChangedUnderItsStepsIsRefused) {
  // The done column of every held step flipped: the episode starts no longer follow.
  std::string bytes = ReadFile(fs::path(path_) / StepColumnFile(2));
  for (char& done : bytes) done = done == 0 ? 1 : 0;
  ForgePart(path_, StepColumnFile(2), bytes);
  ExpectRefused(Status::Code::kInvalidArgument, {"done flags give"});
}

TEST_F(StepCheckpointRestoreTest, ADoneValuePastTwoIsRefusedAsAnAppendsIs) {
  std::string bytes = ReadFile(fs::path(path_) / StepColumnFile(2));
  bytes[bytes.size() / 2] = 7;
  ForgePart(path_, StepColumnFile(2), bytes);
  ExpectRefused(Status::Code::kInvalidArgument, {"step-column-2.bin: held steps", "has done 7"});
}

TEST_F(StepCheckpointRestoreTest, AnItemOverAStepNotHeldIsRefused) {
  std::string steps = ReadFile(fs::path(path_) / "table-0-column-0.bin");
  ASSERT_GE(steps.size(), 3 * sizeof(uint64_t));
  const uint64_t gone = 0;  // the ring wrapped: key 0 is long overwritten
  std::memcpy(steps.data() + 2 * sizeof(uint64_t), &gone, sizeof(gone));
  ForgePart(path_, "table-0-column-0.bin", steps);
  ExpectRefused(Status::Code::kInvalidArgument, {"table-0-column-0.bin: item key", "step key 0 is not held"});
}

// A key far below the next: no table of a 40-step ring holds it (its key
// index would span them all).
TEST_F(StepCheckpointRestoreTest, AnItemKeyFarBelowTheNextKeyIsRefused) {
  std::string records = ReadFile(fs::path(path_) / checkpoint_layout::TablePart(0, checkpoint_layout::kItemSlotsFile));
  const std::string state_bytes = ReadFile(fs::path(path_) / "state.bin");
  proto::BoundedInputArchive archive(std::as_bytes(std::span(state_bytes.data(), state_bytes.size())));
  CheckpointState state;
  archive(state);
  ASSERT_GT(state.tables.at(0).replay.next_key, 80u) << "the driver issued too few keys for this test";
  const uint64_t old = state.tables[0].replay.next_key - 81;
  std::memcpy(records.data(), &old, sizeof(old));
  ForgePart(path_, checkpoint_layout::TablePart(0, checkpoint_layout::kItemSlotsFile), records);
  ExpectRefused(Status::Code::kInvalidArgument,
                {fmt::format("table-0-item-slots.bin: key {} is not one a table of this ring can hold", old),
                 "at most 80 below"});
}

// Two items over one step (an append refuses the second).
TEST_F(StepCheckpointRestoreTest, TwoItemsOverOneStepAreRefused) {
  std::string steps = ReadFile(fs::path(path_) / "table-0-column-0.bin");
  ASSERT_GE(steps.size(), 3 * sizeof(uint64_t));
  std::memcpy(steps.data() + 2 * sizeof(uint64_t), steps.data() + sizeof(uint64_t), sizeof(uint64_t));
  ForgePart(path_, "table-0-column-0.bin", steps);
  ExpectRefused(Status::Code::kInvalidArgument, {"table-0-column-0.bin: item keys", "are both over step key"});
}

// An item over a step the stream holds, but one an append would refuse: a
// step whose n-step item is not whole yet (the stream's newest step).
TEST_F(StepCheckpointRestoreTest, AnItemAnAppendWouldRefuseIsRefused) {
  std::string steps = ReadFile(fs::path(path_) / "table-0-column-0.bin");
  const std::string dones = ReadFile(fs::path(path_) / StepColumnFile(2));
  const size_t held = dones.size();
  const uint64_t oldest = State().next_key - held;
  // A stream's newest held step, its episode going on: step t+3 is not appended yet.
  size_t newest = held;
  for (size_t i = held; i-- > 0 && newest == held;) {
    bool last_of_stream = true;
    for (size_t j = i + 1; j < held; ++j) last_of_stream &= Info(3 * j) != Info(3 * i);
    if (last_of_stream && dones[i] == 0) newest = i;
  }
  ASSERT_LT(newest, held) << "every stream's newest step ends an episode";
  const uint64_t key = oldest + newest;
  std::memcpy(steps.data(), &key, sizeof(key));
  ForgePart(path_, "table-0-column-0.bin", steps);
  ExpectRefused(Status::Code::kInvalidArgument, {"table-0-column-0.bin: item key"});
}

TEST_F(StepCheckpointRestoreTest, ADamagedStepColumnIsRefusedByItsHash) {
  std::string bytes = ReadFile(fs::path(path_) / StepColumnFile(0));
  bytes[7] = static_cast<char>(bytes[7] ^ 1);
  std::ofstream(fs::path(path_) / StepColumnFile(0), std::ios::binary | std::ios::trunc) << bytes;
  ExpectRefused(Status::Code::kInvalidArgument, {"step-column-0.bin: its hash does not match"});
}

}  // namespace
}  // namespace perserve::service
