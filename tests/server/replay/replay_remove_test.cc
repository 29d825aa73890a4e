// Replay::Remove and CheckAdd: what step replays build on (issues 27, 33).
// A removed item is gone: never drawn, out of the min and the size, its slot
// free for the next item, and an update to it is stale; CheckAdd refuses
// exactly what Add would.
#include <cmath>
#include <limits>
#include <set>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "server/replay/replay_test_util.h"

namespace perserve::replay {
namespace {

using replay_test::Ids;
using replay_test::Leaf;

std::unique_ptr<Replay> MakeReplay(int64_t capacity, double alpha = 1.0) {
  return replay_test::MakeReplay(ReplayOptions{capacity, alpha, tree::Device::kCpu, 7});
}

TEST(ReplayRemoveTest, RemovedItemsAreNeverDrawnAndLeaveTheMin) {
  auto replay = MakeReplay(8);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(6, Ids(0, 6), std::vector<double>{0.5, 1, 2, 3, 4, 5}, &first).ok());
  EXPECT_EQ(replay->tree().Min(), 0.5);
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{0, 2, 2, 4}).ok());  // a repeat is ignored
  // A removed item is gone: not held, its slot free and its leaf 0.
  EXPECT_EQ(replay->size(), 3);
  for (const uint64_t key : {0, 2, 4}) {
    EXPECT_EQ(replay->SlotOf(key), -1) << key;
    EXPECT_EQ(replay->KeyAt(static_cast<int64_t>(key)), Replay::kNoKey) << key;
    EXPECT_EQ(Leaf(*replay, static_cast<int64_t>(key)), 0.0) << key;
  }
  EXPECT_EQ(replay->tree().Min(), 1.0);
  EXPECT_EQ(replay->tree().Total(), 1.0 + 3.0 + 5.0);
  EXPECT_EQ(replay->oldest_key(), 1u);
  SampleResult sample;
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(replay->Sample(32, 1.0, &sample).ok());
    for (size_t i = 0; i < sample.keys.size(); ++i) {
      ASSERT_TRUE(sample.keys[i] == 1 || sample.keys[i] == 3 || sample.keys[i] == 5) << sample.keys[i];
      EXPECT_EQ(sample.weights[i], 1.0 / static_cast<double>(sample.keys[i]));  // key k has priority k; min 1
    }
  }
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1, 3, 5}).ok());
  EXPECT_EQ(replay->size(), 0);
  EXPECT_EQ(replay->oldest_key(), replay->next_key());
  EXPECT_EQ(replay->tree().Total(), 0.0);
  const Status empty = replay->Sample(4, 1.0, &sample);
  EXPECT_EQ(empty.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty.ToString();
  EXPECT_EQ(replay->SampleAt(std::vector<double>{0.5}, &sample).code(), Status::Code::kFailedPrecondition);
}

TEST(ReplayRemoveTest, KeysNotHeldAreIgnored) {
  auto replay = MakeReplay(4);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(4, Ids(0, 4), {}, &first).ok());
  ASSERT_TRUE(replay->Add(2, Ids(4, 2), {}, &first).ok());  // full: the FIFO remover takes keys 0 and 1
  const double total = replay->tree().Total();
  // 0 and 1 are gone (their slots hold 5 and 4), 6 and 99 never issued.
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{0, 1, 6, 99}).ok());
  EXPECT_EQ(replay->tree().Total(), total);
  EXPECT_EQ(replay->size(), 4);
  EXPECT_EQ(Leaf(*replay, 0), 1.0);
  EXPECT_EQ(replay->KeyAt(0), 5u);
  ASSERT_TRUE(replay->Remove({}).ok());
}

// The one item model (it replaced the test of live_size, which counted
// removed items that kept their slots until overwritten): size() is the
// items held, a removed item's slot is taken again, the last freed first,
// and the FIFO remover counts only the items held.
TEST(ReplayRemoveTest, RemovedItemsFreeTheirSlotsAndSizeCountsHeldItems) {
  auto replay = MakeReplay(4);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(3, Ids(0, 3), {}, &first).ok());
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{0, 1}).ok());
  EXPECT_EQ(replay->size(), 1);
  ASSERT_TRUE(replay->Add(1, Ids(3, 1), {}, &first).ok());  // key 3: slot 1, the last freed
  EXPECT_EQ(replay->SlotOf(3), 1);
  EXPECT_EQ(replay->size(), 2);
  ASSERT_TRUE(replay->Add(1, Ids(4, 1), {}, &first).ok());  // key 4: slot 0
  EXPECT_EQ(replay->SlotOf(4), 0);
  EXPECT_EQ(replay->size(), 3);
  EXPECT_EQ(replay->slots_used(), 3);
  // One more fits; the second pushes out the oldest held item, key 2 (slot 2).
  ASSERT_TRUE(replay->Add(2, Ids(5, 2), {}, &first).ok());
  EXPECT_EQ(replay->size(), 4);
  EXPECT_EQ(replay->SlotOf(2), -1);
  EXPECT_EQ(replay->SlotOf(5), 2);
  EXPECT_EQ(replay->SlotOf(6), 3);
  EXPECT_EQ(replay->oldest_key(), 3u);
  EXPECT_EQ(replay->tree().Total(), 4.0);
}

TEST(ReplayRemoveTest, UpdatesToRemovedItemsAreStale) {
  auto replay = MakeReplay(8);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(5, Ids(0, 5), std::vector<double>{1, 1, 1, 1, 1}, &first).ok());
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1, 4}).ok());
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{1, 2, 4}, std::vector<double>{9, 9, 9}, &counts).ok());
  EXPECT_EQ(counts.applied, 1);
  EXPECT_EQ(counts.stale, 2);
  EXPECT_EQ(Leaf(*replay, 1), 0.0);  // not brought back
  EXPECT_EQ(Leaf(*replay, 4), 0.0);
  EXPECT_EQ(Leaf(*replay, 2), 9.0);
  EXPECT_EQ(replay->size(), 3);
  EXPECT_EQ(replay->counters().stale_updates_dropped, 2);
  // Nor does a new item in the removed item's slot take the removed key's update.
  ASSERT_TRUE(replay->Add(1, Ids(5, 1), std::vector<double>{2}, &first).ok());
  EXPECT_EQ(replay->SlotOf(5), 4);
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{4}, std::vector<double>{30}, &counts).ok());
  EXPECT_EQ(counts.stale, 1);
  EXPECT_EQ(Leaf(*replay, 4), 2.0);
}

// A checkpoint restores the held items as saved (key, slot, leaf), each leaf
// a held item's (never 0: a removed item is not saved), and the slots no
// item holds are free again, the lowest taken first. (It replaced the test
// of restored 0 leaves, which the one item model no longer has.)
TEST(ReplayRemoveTest, RestoredItemsKeepTheirSlotsAndTheOthersAreFree) {
  auto replay = MakeReplay(4);
  const std::vector<uint64_t> keys = {0, 2};
  const std::vector<int64_t> slots = {3, 1};
  ASSERT_TRUE(replay->RestoreItems(keys, slots, Ids(0, 2), std::vector<double>{1, 2}).ok());
  ReplayState state;
  state.next_key = 3;
  ASSERT_TRUE(replay->RestoreState(state).ok());
  EXPECT_EQ(replay->size(), 2);
  EXPECT_EQ(replay->SlotOf(0), 3);
  EXPECT_EQ(replay->SlotOf(2), 1);
  EXPECT_EQ(replay->oldest_key(), 0u);
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{1}, std::vector<double>{5}, &counts).ok());
  EXPECT_EQ(counts.stale, 1);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(2, Ids(3, 2), {}, &first).ok());
  EXPECT_EQ(first, 3u);
  EXPECT_EQ(replay->SlotOf(3), 0);
  EXPECT_EQ(replay->SlotOf(4), 2);
  // One more: the FIFO remover takes key 0, the oldest.
  ASSERT_TRUE(replay->Add(1, Ids(5, 1), {}, &first).ok());
  EXPECT_EQ(replay->SlotOf(0), -1);
  EXPECT_EQ(replay->SlotOf(5), 3);

  // Refused: a 0 leaf (a removed item is never saved), a slot outside the
  // capacity or taken twice, a key held twice.
  auto fresh = MakeReplay(4);
  const auto restore = [&](std::vector<uint64_t> k, std::vector<int64_t> s, std::vector<double> l) {
    return fresh->RestoreItems(k, s, Ids(0, static_cast<int64_t>(k.size())), l).code();
  };
  EXPECT_EQ(restore({0}, {0}, {0.0}), Status::Code::kInvalidArgument);
  EXPECT_EQ(restore({0}, {4}, {1.0}), Status::Code::kInvalidArgument);
  EXPECT_EQ(restore({0, 1}, {2, 2}, {1.0, 1.0}), Status::Code::kInvalidArgument);
  auto twice = MakeReplay(4);
  EXPECT_EQ(twice->RestoreItems(std::vector<uint64_t>{7, 7}, std::vector<int64_t>{0, 1}, Ids(0, 2),
                                std::vector<double>{1, 1}).code(),
            Status::Code::kInvalidArgument);
}

// CheckAdd refuses exactly what Add refuses, with Add's messages, and
// changes nothing either way.
TEST(ReplayRemoveTest, CheckAddRefusesWhatAddRefuses) {
  auto replay = MakeReplay(8, 2.0);
  uint64_t first = 0;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double huge = 1e200;  // its square overflows
  const std::vector<std::pair<int64_t, std::vector<double>>> cases = {
      {0, {}}, {9, {}}, {2, {1.0}}, {2, {1.0, nan}}, {2, {1.0, -1.0}}, {2, {0.0, 1.0}}, {3, {1.0, 2.0, huge}},
  };
  for (const auto& [count, priorities] : cases) {
    const Status checked = replay->CheckAdd(count, priorities);
    const Status added = replay->Add(count, Ids(0, count), priorities, &first);
    EXPECT_FALSE(checked.ok()) << count;
    EXPECT_EQ(checked.code(), added.code()) << checked.ToString() << " / " << added.ToString();
    if (count == 3) {
      EXPECT_NE(checked.message().find("position 2"), std::string::npos) << checked.ToString();
    }
  }
  EXPECT_EQ(replay->next_key(), 0u);
  EXPECT_TRUE(replay->CheckAdd(8, {}).ok());
  EXPECT_TRUE(replay->CheckAdd(2, std::vector<double>{1e100, 3.0}).ok());
  EXPECT_EQ(replay->tree().Total(), 0.0);
}

// The tree's total bound: an add whose leaves would pass kMaxTreeTotal is
// refused by CheckAdd, before the tree sees it.
TEST(ReplayRemoveTest, CheckAddRefusesATotalPastTheTreesLimit) {
  auto replay = MakeReplay(8, 1.0);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(1, Ids(0, 1), std::vector<double>{0x1p959}, &first).ok());
  const std::vector<double> more = {0x1p959, 0x1p959};
  EXPECT_EQ(replay->CheckAdd(2, more).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(replay->Add(2, Ids(1, 2), more, &first).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(replay->CheckAdd(1, std::vector<double>{0x1p958}).ok());
}

}  // namespace
}  // namespace perserve::replay
