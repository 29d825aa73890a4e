// StepStore (issue 33): the one ring of steps every server keeps. Its slack
// slots past the newest step, where an append's columns apart are received
// (WriteRegions) and checked before Commit makes them steps; the keys whose
// rows an append overwrites (OverwrittenKeys); streams and episodes.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "store/step_store.h"

namespace perserve::store {
namespace {

// x int32 [2], reward float32, done uint8: column indices 0, 1, 2.
Schema StepSchema() {
  return Schema{{{"x", DType::kInt32, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
}

// Steps numbered first .. first + count - 1 in the wire layout: x = (n, -n),
// reward n / 2, done from `done` (0 where it is shorter).
std::vector<std::byte> Steps(int32_t first, int32_t count, const std::vector<uint8_t>& done = {}) {
  std::vector<std::byte> bulk(static_cast<size_t>(count) * 13);
  for (int32_t j = 0; j < count; ++j) {
    const int32_t n = first + j;
    const int32_t x[2] = {n, -n};
    const float reward = static_cast<float>(n) / 2;
    std::memcpy(bulk.data() + 8 * j, x, 8);
    std::memcpy(bulk.data() + 8 * count + 4 * j, &reward, 4);
    bulk[static_cast<size_t>(12 * count + j)] = std::byte{static_cast<size_t>(j) < done.size() ? done[j] : uint8_t{0}};
  }
  return bulk;
}

int32_t X(const StepStore& store, uint64_t key) {
  int32_t x = 0;
  std::memcpy(&x, store.Row(0, key), 4);
  return x;
}

void Append(StepStore* store, int stream, const std::vector<std::byte>& bulk, int64_t steps) {
  const StepBatch batch{steps, bulk, false};
  ASSERT_TRUE(store->CheckBatch(batch).ok());
  store->Commit(stream, batch);
}

// Receives `bulk` into the ring's next slots (as a receive straight into the
// store does), checks it there and commits it.
Status AppendInRing(StepStore* store, int stream, const std::vector<std::byte>& bulk, int64_t steps) {
  std::vector<std::span<std::byte>> regions;
  store->WriteRegions(steps, &regions);
  TransitionStore::CopyInto(bulk, regions);
  const StepBatch batch{steps, {}, true};
  PERSERVE_RETURN_IF_ERROR(store->CheckBatch(batch));
  store->Commit(stream, batch);
  return Status::Ok();
}

TEST(StepStoreTest, TheSlackSlotsPastTheNewestStepHoldNoHeldStep) {
  StepStore store(StepSchema(), /*capacity=*/4, /*slack=*/2, /*streams=*/1, 1, 2);
  EXPECT_EQ(store.slots(), 6);
  EXPECT_EQ(store.slack(), 2);
  Append(&store, 0, Steps(0, 4), 4);
  EXPECT_EQ(store.held(), 4);
  // The next two steps' slots (4, 5) are free: writing there changes no held step.
  std::vector<std::span<std::byte>> regions;
  store.WriteRegions(2, &regions);
  ASSERT_EQ(regions.size(), 3u);  // one per column: no wrap
  TransitionStore::CopyInto(Steps(100, 2), regions);
  for (uint64_t key = 0; key < 4; ++key) EXPECT_EQ(X(store, key), static_cast<int32_t>(key));
  EXPECT_EQ(store.next_key(), 4u);
  EXPECT_EQ(store.stream_steps(0), 4);
  // Committed in place: keys 4 and 5, the ring's oldest now key 2.
  store.Commit(0, StepBatch{2, {}, true});
  EXPECT_EQ(store.oldest_key(), 2u);
  EXPECT_EQ(X(store, 4), 100);
  EXPECT_EQ(X(store, 5), 101);
  EXPECT_EQ(store.Info(5).reward, 50.5);
  EXPECT_EQ(store.Info(5).index, 5);
  // Keys 0 and 1 left the ring; their slots (0, 1) are the slack now.
  EXPECT_EQ(store.stream_oldest(0), 2);
  store.WriteRegions(2, &regions);
  TransitionStore::CopyInto(Steps(200, 2), regions);
  for (uint64_t key = 2; key < 6; ++key) EXPECT_EQ(X(store, key), key < 4 ? static_cast<int32_t>(key) : 96 + key);
}

// Where the next steps' slots wrap, each column's region splits in two, in
// the wire layout's order; committed, the steps are what was sent.
TEST(StepStoreTest, AppendsReceivedIntoTheRingWrapAndCommitAsSent) {
  StepStore store(StepSchema(), 4, 2, 2, 1, 2);
  Append(&store, 0, Steps(0, 4), 4);
  Append(&store, 0, Steps(4, 1), 1);
  std::vector<std::span<std::byte>> regions;
  store.WriteRegions(2, &regions);  // slots 5, 0
  ASSERT_EQ(regions.size(), 6u);
  EXPECT_EQ(regions[0].size(), 8u);
  EXPECT_EQ(regions[1].size(), 8u);
  EXPECT_EQ(regions[4].size(), 1u);
  ASSERT_TRUE(AppendInRing(&store, 1, Steps(50, 2, {0, kTerminal}), 2).ok());
  EXPECT_EQ(store.next_key(), 7u);
  EXPECT_EQ(store.oldest_key(), 3u);
  EXPECT_EQ(X(store, 5), 50);
  EXPECT_EQ(X(store, 6), 51);
  EXPECT_EQ(store.SlotOf(6), 0);
  EXPECT_EQ(store.Info(6).done, kTerminal);
  EXPECT_EQ(store.Info(6).stream, 1);
  EXPECT_EQ(store.Info(6).index, 1);
  EXPECT_EQ(store.stream_steps(1), 2);
  EXPECT_EQ(store.next_episode_start(1), 2);  // after a done step: a new episode
  EXPECT_EQ(store.KeyOf(1, 0), 5u);
  EXPECT_EQ(store.stream_oldest(0), 3);
  EXPECT_EQ(store.KeyOf(0, 3), 3u);
}

// A batch received into the ring is checked there (its done values), and a
// refused one changes nothing: the held steps, keys and streams stay.
TEST(StepStoreTest, ABatchInTheRingIsCheckedThereAndARefusedOneChangesNothing) {
  StepStore store(StepSchema(), 4, 2, 1, 1, 2);
  Append(&store, 0, Steps(0, 4), 4);
  const Status refused = AppendInRing(&store, 0, Steps(10, 2, {0, 3}), 2);
  EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("step 1 of the batch has done 3"), std::string::npos) << refused.ToString();
  EXPECT_EQ(store.next_key(), 4u);
  EXPECT_EQ(store.oldest_key(), 0u);
  EXPECT_EQ(store.stream_steps(0), 4);
  for (uint64_t key = 0; key < 4; ++key) EXPECT_EQ(X(store, key), static_cast<int32_t>(key));
  // More steps than the slack holds cannot have been received there.
  EXPECT_FALSE(store.CheckBatch(StepBatch{3, {}, true}).ok());
  // The next append in the ring is taken as usual.
  ASSERT_TRUE(AppendInRing(&store, 0, Steps(20, 2), 2).ok());
  EXPECT_EQ(X(store, 4), 20);
  EXPECT_EQ(store.oldest_key(), 2u);
}

// The keys whose rows writing the next steps overwrites: those `slots`
// below them, once the ring has gone round, and never a key a restore says
// was not held here.
TEST(StepStoreTest, OverwrittenKeysAreTheKeysASlotsLengthBelow) {
  StepStore store(StepSchema(), 4, 2, 1, 1, 2);
  uint64_t first = 0, end = 0;
  store.OverwrittenKeys(6, &first, &end);
  EXPECT_EQ(first, end);  // nothing written yet
  Append(&store, 0, Steps(0, 3), 3);
  store.OverwrittenKeys(3, &first, &end);
  EXPECT_EQ(first, end);  // slots 3, 4, 5: never written
  store.OverwrittenKeys(5, &first, &end);  // slots 3, 4, 5, 0, 1
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(end, 2u);
  Append(&store, 0, Steps(3, 4), 4);
  Append(&store, 0, Steps(7, 1), 1);  // next key 8: keys 4 .. 7 held, 2 and 3 still in their slots
  store.OverwrittenKeys(3, &first, &end);  // slots 2, 3, 4
  EXPECT_EQ(first, 2u);
  EXPECT_EQ(end, 5u);
  EXPECT_EQ(store.oldest_key(), 4u);

  // After a restore that begins at key 100, keys below it were never here.
  StepStore restored(StepSchema(), 4, 2, 1, 1, 2);
  restored.StartRestore(100, std::vector<int64_t>{7}, std::vector<int64_t>{7});
  restored.OverwrittenKeys(6, &first, &end);
  EXPECT_EQ(first, end);
  EXPECT_EQ(restored.oldest_key(), 100u);
  Append(&restored, 0, Steps(0, 4), 4);
  EXPECT_EQ(restored.KeyOf(0, 7), 100u);
  restored.OverwrittenKeys(4, &first, &end);  // slots of keys 104 .. 107: 2, 3, 4, 5 (keys 100, 101 there)
  EXPECT_EQ(first, 100u);
  EXPECT_EQ(end, 102u);
}

// Steps pushed out of the ring leave their streams oldest first; a store
// without a done column (transitions) has no episodes: done 0, one episode
// per stream, rewards 0.
TEST(StepStoreTest, StreamsLoseTheirOldestStepsAndTransitionsHaveNoEpisodes) {
  StepStore store(Schema{{{"x", DType::kInt32, {2}}}}, 3, 1, 2, -1, -1);
  EXPECT_FALSE(store.episodic());
  const std::vector<std::byte> two = {std::byte{1}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{2},
                                      std::byte{0}, std::byte{0}, std::byte{0}, std::byte{3}, std::byte{0},
                                      std::byte{0}, std::byte{0}, std::byte{4}, std::byte{0}, std::byte{0},
                                      std::byte{0}};
  Append(&store, 0, two, 2);
  Append(&store, 1, two, 2);  // keys 2, 3: key 0 (stream 0's index 0) leaves
  EXPECT_EQ(store.stream_oldest(0), 1);
  EXPECT_EQ(store.stream_steps(0), 2);
  EXPECT_EQ(store.KeyOf(0, 1), 1u);
  Append(&store, 1, two, 2);  // keys 4, 5: stream 0 holds none now
  EXPECT_EQ(store.stream_oldest(0), 2);
  EXPECT_EQ(store.stream_steps(0), 2);
  EXPECT_EQ(store.stream_oldest(1), 1);
  for (uint64_t key = 3; key < 6; ++key) {
    EXPECT_EQ(store.Info(key).done, 0);
    EXPECT_EQ(store.Info(key).episode_start, 0);
    EXPECT_EQ(store.Info(key).reward, 0.0);
  }
}

}  // namespace
}  // namespace perserve::store
