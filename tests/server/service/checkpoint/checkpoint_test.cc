// Checkpoints (issue 17), without MPI: a bit-exact round trip (store bytes,
// every tree node, keys, the next samples), a checkpoint taken while adds
// overwrite the ring, damaged and mismatched checkpoints, a write cut short,
// and a directory that cannot be written.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/service/checkpoint/checkpoint_test_util.h"

namespace perserve::service {
namespace {

using namespace checkpoint_test;
using std::chrono::microseconds;

TEST(Hash64Test, TheSameHashHoweverTheBytesAreSplit) {
  std::vector<std::byte> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 31 + 7);
  Hash64 whole;
  whole.Update(bytes);
  for (size_t step : {1, 3, 7, 8, 13, 999}) {
    Hash64 pieces;
    for (size_t i = 0; i < bytes.size(); i += step) pieces.Update(std::span(bytes).subspan(i, std::min(step, bytes.size() - i)));
    EXPECT_EQ(pieces.Finish(), whole.Finish()) << "pieces of " << step;
  }
  bytes[500] ^= std::byte{1};
  Hash64 changed;
  changed.Update(bytes);
  EXPECT_NE(changed.Finish(), whole.Finish());
}

TEST_F(CheckpointTest, ARoundTripIsBitExactAndTheNextSamplesAreTheSame) {
  auto replay = MakeReplay(1000);
  AddItems(replay.get(), 0, 2600, &rng_);  // wrapped twice: keys 1600..2599 held
  replay::SampleResult sample;
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(replay->Sample(64, 0.4, &sample).ok());  // the counter moves
  const std::vector<uint64_t> keys = sample.keys;
  {
    replay::UpdateCounts counts;
    ASSERT_TRUE(replay->UpdatePriorities(keys, std::vector<double>(keys.size(), 9.5), &counts).ok());
  }
  CheckpointWriter writer(dir_.string(), 0, 1);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  EXPECT_EQ(writer.last_path(), (dir_ / "shard-0-of-1" / "checkpoint-000000").string());

  auto restored = MakeReplay(1000, /*seed=*/999);  // the checkpoint's seed wins
  CheckpointState state;
  std::string loaded;
  const Status status = LoadCheckpoint(dir_.string(), 0, 1, restored.get(), &state, &loaded);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(loaded, writer.last_path());
  EXPECT_EQ(restored->next_key(), replay->next_key());
  EXPECT_EQ(restored->size(), replay->size());
  EXPECT_EQ(restored->max_priority(), replay->max_priority());
  EXPECT_EQ(restored->counters().items_added, 2600);
  EXPECT_EQ(state.limiter.inserted, 123);
  ASSERT_EQ(state.episodes.size(), 1u);
  EXPECT_EQ(state.episodes[0].return_sum, 2.5);
  EXPECT_EQ(Items(*restored), Items(*replay));
  ExpectSameNodes(*replay, *restored);
  // The next 100 samples equal those of the replay that was never stopped.
  for (int i = 0; i < 100; ++i) {
    replay::SampleResult a, b;
    ASSERT_TRUE(replay->Sample(32, 0.4, &a).ok());
    ASSERT_TRUE(restored->Sample(32, 0.4, &b).ok());
    ASSERT_EQ(a.keys, b.keys) << "sample " << i;
    ASSERT_EQ(a.weights, b.weights) << "sample " << i;
    ASSERT_EQ(a.probabilities, b.probabilities) << "sample " << i;
  }
  // New keys continue after the restored ones: an old key stays stale.
  AddItems(restored.get(), 5000, 1000, &rng_);
  replay::UpdateCounts counts;
  ASSERT_TRUE(restored->UpdatePriorities(keys, std::vector<double>(keys.size(), 1.0), &counts).ok());
  EXPECT_EQ(counts.stale, static_cast<int64_t>(keys.size()));
}

TEST_F(CheckpointTest, ACheckpointIsTheReplayAsItWasWhenItBeganWhileAddsOverwriteTheRing) {
  auto replay = MakeReplay(4000);
  AddItems(replay.get(), 0, 4000, &rng_);
  const std::vector<std::byte> at_begin = Items(*replay);
  const auto twin = MakeReplay(4000);
  CheckpointWriter writer(dir_.string(), 0, 1);
  int64_t next_id = 4000;
  const Status written = Write(&writer, replay.get(), [&] {
    // Every pass, an add that overwrites the oldest items.
    ASSERT_TRUE(writer.BeforeAdd(*replay, 700).ok());
    AddItems(replay.get(), next_id, 700, &rng_);
    next_id += 700;
  });
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_GT(next_id, 4000 + 4000) << "the adds wrapped the ring during the checkpoint";
  auto restored = MakeReplay(4000);
  CheckpointState state;
  std::string loaded;
  ASSERT_TRUE(LoadCheckpoint(dir_.string(), 0, 1, restored.get(), &state, &loaded).ok());
  EXPECT_EQ(restored->next_key(), 4000u);
  EXPECT_EQ(Items(*restored), at_begin);
}

TEST_F(CheckpointTest, DamagedTruncatedOrMismatchedCheckpointsAreClearErrors) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 300, &rng_);
  CheckpointWriter writer(dir_.string(), 0, 1);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  const fs::path checkpoint = writer.last_path();
  auto load = [&](int64_t capacity = 500, int shards = 1) {
    auto target = MakeReplay(capacity);
    CheckpointState state;
    std::string loaded;
    return LoadCheckpoint(dir_.string(), 0, shards, target.get(), &state, &loaded);
  };
  ASSERT_TRUE(load().ok());

  Status status = load(/*capacity=*/600);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("capacity 500; this server has schema"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("capacity 600"), std::string::npos) << status.message();

  status = load(500, /*shards=*/2);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("shard-0-of-1"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("same number of server ranks"), std::string::npos) << status.message();

  // One flipped byte in a column.
  const fs::path column = checkpoint / "column-1.bin";
  {
    std::fstream file(column, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x5a');
  }
  status = load();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("column-1.bin: its hash does not match"), std::string::npos) << status.message();

  // Truncated.
  fs::resize_file(column, 10);
  status = load();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("truncated or damaged"), std::string::npos) << status.message();

  // A manifest cut short.
  std::ofstream(checkpoint / "MANIFEST", std::ios::trunc) << "perserve-checkpoint 1\nshard 0 of 1\n";
  status = load();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("cut short"), std::string::npos) << status.message();

  // Garbage for a state.
  fs::remove_all(dir_);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  std::ofstream(fs::path(writer.last_path()) / "MANIFEST", std::ios::trunc) << "hello\n";
  EXPECT_EQ(load().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(load().code(), Status::Code::kInvalidArgument);
}

TEST_F(CheckpointTest, AWriteCutShortIsNeverTakenAndThePreviousOneRestores) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 200, &rng_);
  {
    CheckpointWriter writer(dir_.string(), 0, 1);
    { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  }
  const std::vector<std::byte> first = Items(*replay);
  AddItems(replay.get(), 200, 100, &rng_);
  {
    // A second checkpoint dies half-way (the writer gone with its process).
    CheckpointWriter writer(dir_.string(), 0, 1);
    ASSERT_TRUE(writer.Begin(*replay, StateOf(*replay)).ok());
    bool done = false;
    ASSERT_TRUE(writer.Step(*replay, microseconds(0), &done).ok());
    ASSERT_FALSE(done);
    fs::copy(fs::path(writer.path() + ".partial"), fs::path(dir_ / "left"), fs::copy_options::recursive);
  }
  fs::rename(dir_ / "left", dir_ / "shard-0-of-1" / "checkpoint-000001.partial");  // as a crash leaves it
  auto restored = MakeReplay(500);
  CheckpointState state;
  std::string loaded;
  ASSERT_TRUE(LoadCheckpoint(dir_.string(), 0, 1, restored.get(), &state, &loaded).ok());
  EXPECT_EQ(loaded, (dir_ / "shard-0-of-1" / "checkpoint-000000").string());
  EXPECT_EQ(Items(*restored), first);
  // The next writer clears the leftover and numbers past it.
  CheckpointWriter writer(dir_.string(), 0, 1);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  EXPECT_EQ(writer.last_path(), (dir_ / "shard-0-of-1" / "checkpoint-000002").string());
  EXPECT_FALSE(fs::exists(dir_ / "shard-0-of-1" / "checkpoint-000001.partial"));
  EXPECT_FALSE(fs::exists(dir_ / "shard-0-of-1" / "checkpoint-000000")) << "the older one goes once the new is done";
}

TEST_F(CheckpointTest, ADirectoryThatCannotBeMadeIsAnErrorAndNothingStarts) {
  auto replay = MakeReplay(100);
  AddItems(replay.get(), 0, 50, &rng_);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "not-a-directory") << "x";
  CheckpointWriter writer((dir_ / "not-a-directory").string(), 0, 1);
  const Status status = writer.Begin(*replay, StateOf(*replay));
  EXPECT_EQ(status.code(), Status::Code::kUnavailable);
  EXPECT_NE(status.message().find("cannot create"), std::string::npos) << status.message();
  EXPECT_FALSE(writer.active());
  EXPECT_TRUE(writer.last_path().empty());
}

TEST_F(CheckpointTest, AWriteThatFailsAbandonsThePartialAndKeepsThePreviousOne) {
  auto replay = MakeReplay(20000);
  AddItems(replay.get(), 0, 200, &rng_);
  CheckpointWriter writer(dir_.string(), 0, 1);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  const std::string previous = writer.last_path();
  AddItems(replay.get(), 200, 19800, &rng_);  // 20000 items: column files over 64 KiB
  // Files may not grow past 64 KiB now: writes fail with EFBIG, as on a full disk.
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status status = Write(&writer, replay.get());
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("write "), std::string::npos) << status.message();
  EXPECT_FALSE(writer.active());
  EXPECT_EQ(writer.last_path(), previous);
  EXPECT_FALSE(fs::exists(dir_ / "shard-0-of-1" / "checkpoint-000001.partial"));
  auto restored = MakeReplay(20000);
  CheckpointState state;
  std::string loaded;
  ASSERT_TRUE(LoadCheckpoint(dir_.string(), 0, 1, restored.get(), &state, &loaded).ok());
  EXPECT_EQ(loaded, previous);
  EXPECT_EQ(restored->size(), 200);
}

}  // namespace
}  // namespace perserve::service
