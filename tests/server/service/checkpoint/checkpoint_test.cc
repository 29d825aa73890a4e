// Checkpoints (issue 17) of a table of transitions, without MPI: a
// bit-exact round trip (every held item's key, slot, leaf and rows, the
// ring, every tree node, the next samples, and what later adds do), a
// checkpoint taken while adds replace its items, damaged and mismatched
// checkpoints, a write cut short, and a directory that cannot be written.
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
  auto twin = MakeReplay(1000);
  std::mt19937_64 twin_rng = rng_;
  AddItems(replay.get(), 0, 2600, &rng_);  // the ring wrapped twice: keys 1600..2599 held
  AddItems(twin.get(), 0, 2600, &twin_rng);
  std::vector<uint64_t> keys;
  for (replay::StepReplay* r : {replay.get(), twin.get()}) {
    replay::SampleResult sample;
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(r->mutable_items().Sample(64, 0.4, &sample).ok());  // the counter moves
    keys = sample.keys;
    replay::UpdateCounts counts;
    ASSERT_TRUE(r->mutable_items().UpdatePriorities(keys, std::vector<double>(keys.size(), 9.5), &counts).ok());
  }
  CheckpointWriter writer(dir_.string(), 0, 1);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  EXPECT_EQ(writer.last_path(), (dir_ / "shard-0-of-1" / "checkpoint-000000").string());

  auto restored = MakeReplay(1000, /*seed=*/999);  // the checkpoint's seed wins
  CheckpointState state;
  const Status status = Restore(dir_.string(), restored.get(), &state);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(restored->items().size(), 1000);
  EXPECT_EQ(restored->items().counters().items_added, 2600);
  EXPECT_EQ(restored->items().counters().items_sampled, replay->items().counters().items_sampled);
  EXPECT_EQ(restored->items().State().samples_drawn, replay->items().State().samples_drawn);
  EXPECT_EQ(state.limiter.inserted, 123);
  ASSERT_EQ(state.episodes.size(), 1u);
  EXPECT_EQ(state.episodes[0].return_sum, 2.5);
  ExpectSameTable(*restored, *twin);
  // The next 100 samples equal those of the replay that was never stopped.
  ExpectSameSamples(restored.get(), twin.get(), 100);
  // Later adds go on as in the twin (every slot was held: the next items
  // take the slots the oldest free), and new keys continue after the
  // restored ones: an old key stays stale.
  std::mt19937_64 later_a(8), later_b(8);
  AddItems(restored.get(), 5000, 1000, &later_a);
  AddItems(twin.get(), 5000, 1000, &later_b);
  ExpectSameTable(*restored, *twin);
  ExpectSameSamples(restored.get(), twin.get(), 10);
  replay::UpdateCounts counts;
  ASSERT_TRUE(
      restored->mutable_items().UpdatePriorities(keys, std::vector<double>(keys.size(), 1.0), &counts).ok());
  EXPECT_EQ(counts.stale, static_cast<int64_t>(keys.size()));
}

TEST_F(CheckpointTest, ACheckpointIsTheReplayAsItWasWhenItBeganWhileAddsOverwriteTheRing) {
  auto replay = MakeReplay(4000);
  AddItems(replay.get(), 0, 4000, &rng_);
  const std::vector<HeldItem> at_begin = HeldItems(*replay);
  const RingContents ring_at_begin = Ring(*replay);
  CheckpointWriter writer(dir_.string(), 0, 1);
  int64_t next_id = 4000;
  const Status written = Write(&writer, replay.get(), [&] {
    // Every pass, adds that push the oldest items out and take their slots.
    AddItems(replay.get(), next_id, 700, &rng_, &writer);
    next_id += 700;
  });
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_GT(next_id, 4000 + 4000) << "the adds replaced every item during the checkpoint";
  auto restored = MakeReplay(4000);
  const Status status = Restore(dir_.string(), restored.get());
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(restored->items().next_key(), 4000u);
  EXPECT_TRUE(HeldItems(*restored) == at_begin) << "items changed after Begin went into the checkpoint";
  ExpectSameRing(Ring(*restored), ring_at_begin, "the restored ring and the ring at Begin");
}

TEST_F(CheckpointTest, DamagedTruncatedOrMismatchedCheckpointsAreClearErrors) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 300, &rng_);
  CheckpointWriter writer(dir_.string(), 0, 1);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  const fs::path checkpoint = writer.last_path();
  auto load = [&](int64_t capacity = 500, int shards = 1, int64_t obs_bytes = 5) {
    auto target = MakeReplay(capacity, 17, 0.6, obs_bytes);
    CheckpointState state;
    std::string loaded;
    return LoadCheckpoint(dir_.string(), 0, shards, target.get(), &state, &loaded);
  };
  ASSERT_TRUE(load().ok());

  Status status = load(/*capacity=*/600);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("written with --capacity 500; this server has --capacity 600"), std::string::npos)
      << status.message();

  status = load(500, 1, /*obs_bytes=*/6);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("written with --column id:int64:;obs:uint8:5;x:float32:3; this server has --column "
                                  "id:int64:;obs:uint8:6;x:float32:3"),
            std::string::npos)
      << status.message();

  status = load(500, /*shards=*/2);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("shard-0-of-1"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("same number of server ranks"), std::string::npos) << status.message();

  // One flipped byte in a step column, and in the table's stored rows.
  for (const std::string part : {"step-column-1.bin", "table-0-column-0.bin"}) {
    const fs::path column = checkpoint / part;
    const std::string good = ReadFile(column);
    {
      std::fstream file(column, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(100);
      file.put(static_cast<char>(good[100] ^ 0x5a));
    }
    status = load();
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(status.message().find(part + ": its hash does not match"), std::string::npos) << status.message();
    std::ofstream(column, std::ios::binary | std::ios::trunc) << good;
    ASSERT_TRUE(load().ok()) << part;
  }

  // Truncated.
  fs::resize_file(checkpoint / "step-column-1.bin", 10);
  status = load();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("step-column-1.bin: 10 bytes"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("truncated or damaged"), std::string::npos) << status.message();

  // A manifest cut short.
  std::ofstream(checkpoint / "MANIFEST", std::ios::trunc) << "perserve-checkpoint 3\nshard 0 of 1\n";
  status = load();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("cut short"), std::string::npos) << status.message();

  // Garbage for a manifest.
  fs::remove_all(dir_);
  { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  std::ofstream(fs::path(writer.last_path()) / "MANIFEST", std::ios::trunc) << "hello\n";
  status = load();
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("not a perserve checkpoint manifest"), std::string::npos) << status.message();
}

TEST_F(CheckpointTest, AWriteCutShortIsNeverTakenAndThePreviousOneRestores) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 200, &rng_);
  {
    CheckpointWriter writer(dir_.string(), 0, 1);
    { const Status w = Write(&writer, replay.get()); ASSERT_TRUE(w.ok()) << w.ToString(); }
  }
  const std::vector<HeldItem> first = HeldItems(*replay);
  AddItems(replay.get(), 200, 100, &rng_);
  {
    // A second checkpoint dies half-way (the writer gone with its process).
    CheckpointWriter writer(dir_.string(), 0, 1);
    ASSERT_TRUE(writer.Begin(*replay, StateOf()).ok());
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
  EXPECT_TRUE(HeldItems(*restored) == first);
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
  const Status status = writer.Begin(*replay, StateOf());
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
  EXPECT_EQ(restored->items().size(), 200);
}

}  // namespace
}  // namespace perserve::service
