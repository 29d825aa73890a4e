// Replay::Remove, live_size and CheckAdd: what step replays build on
// (issue 27). A removed item is never drawn, leaves the min, is not live, and
// an update to it is stale; CheckAdd refuses exactly what Add would.
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
  EXPECT_EQ(replay->size(), 6);
  EXPECT_EQ(replay->live_size(), 3);
  EXPECT_EQ(Leaf(*replay, 0), 0.0);
  EXPECT_EQ(Leaf(*replay, 2), 0.0);
  EXPECT_EQ(replay->tree().Min(), 1.0);
  EXPECT_EQ(replay->tree().Total(), 1.0 + 3.0 + 5.0);
  SampleResult sample;
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(replay->Sample(32, 1.0, &sample).ok());
    for (size_t i = 0; i < sample.keys.size(); ++i) {
      ASSERT_TRUE(sample.keys[i] == 1 || sample.keys[i] == 3 || sample.keys[i] == 5) << sample.keys[i];
      EXPECT_EQ(sample.weights[i], 1.0 / static_cast<double>(sample.keys[i]));  // key k has priority k; min 1
    }
  }
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1, 3, 5}).ok());
  EXPECT_EQ(replay->live_size(), 0);
  const Status empty = replay->Sample(4, 1.0, &sample);
  EXPECT_EQ(empty.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(empty.message().find("all removed"), std::string::npos) << empty.ToString();
  EXPECT_EQ(replay->SampleAt(std::vector<double>{0.5}, &sample).code(), Status::Code::kFailedPrecondition);
}

TEST(ReplayRemoveTest, KeysNotHeldAreIgnored) {
  auto replay = MakeReplay(4);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(4, Ids(0, 4), {}, &first).ok());
  ASSERT_TRUE(replay->Add(2, Ids(4, 2), {}, &first).ok());  // keys 4, 5 overwrite 0, 1
  const double total = replay->tree().Total();
  // 0 and 1 are overwritten (their slots hold 4 and 5), 6 and 99 never issued.
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{0, 1, 6, 99}).ok());
  EXPECT_EQ(replay->tree().Total(), total);
  EXPECT_EQ(replay->live_size(), 4);
  EXPECT_EQ(Leaf(*replay, 0), 1.0);
  ASSERT_TRUE(replay->Remove({}).ok());
}

TEST(ReplayRemoveTest, LiveSizeCountsOverwrittenRemovedItemsBack) {
  auto replay = MakeReplay(4);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(3, Ids(0, 3), {}, &first).ok());
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{0, 1}).ok());
  EXPECT_EQ(replay->live_size(), 1);
  ASSERT_TRUE(replay->Add(1, Ids(3, 1), {}, &first).ok());  // slot 3: was empty, not removed
  EXPECT_EQ(replay->size(), 4);
  EXPECT_EQ(replay->live_size(), 2);
  ASSERT_TRUE(replay->Add(1, Ids(4, 1), {}, &first).ok());  // overwrites removed key 0
  EXPECT_EQ(replay->live_size(), 3);
  ASSERT_TRUE(replay->Add(2, Ids(5, 2), {}, &first).ok());  // removed key 1 and live key 2
  EXPECT_EQ(replay->live_size(), 4);
  EXPECT_EQ(replay->tree().Total(), 4.0);
}

// A failed fill's items hold keys with leaf 0: not live, not removable again,
// counted back once overwritten.
TEST(ReplayRemoveTest, FailedFillsAreNotLive) {
  auto replay = MakeReplay(4);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(1, Ids(0, 1), {}, &first).ok());
  const auto fail = [](std::span<const std::span<std::byte>>) { return Status::Unavailable("receive failed"); };
  EXPECT_EQ(replay->AddInPlace(2, {}, fail, &first).code(), Status::Code::kUnavailable);
  EXPECT_EQ(replay->size(), 3);
  EXPECT_EQ(replay->live_size(), 1);
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1, 2}).ok());
  EXPECT_EQ(replay->live_size(), 1);
  ASSERT_TRUE(replay->Add(3, Ids(3, 3), {}, &first).ok());  // overwrites key 0 (live) and 1 (failed)
  EXPECT_EQ(replay->size(), 4);
  EXPECT_EQ(replay->live_size(), 3);
}

TEST(ReplayRemoveTest, UpdatesToRemovedOrFailedItemsAreStale) {
  auto replay = MakeReplay(8);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(4, Ids(0, 4), std::vector<double>{1, 1, 1, 1}, &first).ok());
  const auto fail = [](std::span<const std::span<std::byte>>) { return Status::Unavailable("receive failed"); };
  EXPECT_FALSE(replay->AddInPlace(1, {}, fail, &first).ok());  // key 4, leaf 0
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1}).ok());
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{1, 2, 4}, std::vector<double>{9, 9, 9}, &counts).ok());
  EXPECT_EQ(counts.applied, 1);
  EXPECT_EQ(counts.stale, 2);
  EXPECT_EQ(Leaf(*replay, 1), 0.0);  // not brought back
  EXPECT_EQ(Leaf(*replay, 4), 0.0);
  EXPECT_EQ(Leaf(*replay, 2), 9.0);
  EXPECT_EQ(replay->live_size(), 3);
  EXPECT_EQ(replay->counters().stale_updates_dropped, 2);
}

// A checkpoint restores leaves as saved: 0s are removed items.
TEST(ReplayRemoveTest, RestoredZeroLeavesAreNotLive) {
  auto replay = MakeReplay(4);
  ASSERT_TRUE(replay->RestoreItems(0, 3, Ids(0, 3), std::vector<double>{1, 0, 2}).ok());
  ReplayState state;
  state.next_key = 3;
  ASSERT_TRUE(replay->RestoreState(state).ok());
  EXPECT_EQ(replay->size(), 3);
  EXPECT_EQ(replay->live_size(), 2);
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{1}, std::vector<double>{5}, &counts).ok());
  EXPECT_EQ(counts.stale, 1);
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
