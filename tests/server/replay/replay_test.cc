// PER semantics of the replay layer: keys, default priorities, IS weights,
// stale and unknown keys, and nothing applied from a rejected request.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "server/replay/replay_test_util.h"

namespace perserve::replay {
namespace {

using replay_test::Ids;
using replay_test::Leaf;

std::unique_ptr<Replay> MakeReplay(int64_t capacity, double alpha, bool max_priority_from_adds = false) {
  ReplayOptions options{capacity, alpha, tree::Device::kCpu, 7};
  options.max_priority_from_adds = max_priority_from_adds;
  return replay_test::MakeReplay(options);
}

// With max_priority_from_adds, so an add's priorities raise the running max
// (the default, updates only, is priority_policy_test's).
TEST(ReplayTest, KeysAreSequenceNumbersAndMissingPrioritiesTakeTheRunningMax) {
  auto replay = MakeReplay(8, 0.5, /*max_priority_from_adds=*/true);
  uint64_t first = 99;
  ASSERT_TRUE(replay->Add(2, Ids(0, 2), {}, &first).ok());
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(Leaf(*replay, 0), 1.0);  // 1.0 before any priority was seen
  const std::vector<double> given = {4.0, 9.0};
  ASSERT_TRUE(replay->Add(2, Ids(2, 2), given, &first).ok());
  EXPECT_EQ(first, 2u);
  EXPECT_EQ(Leaf(*replay, 3), std::pow(9.0, 0.5));
  ASSERT_TRUE(replay->Add(1, Ids(4, 1), {}, &first).ok());
  EXPECT_EQ(Leaf(*replay, 4), std::pow(9.0, 0.5));  // the largest priority seen so far
  EXPECT_EQ(replay->size(), 5);
  EXPECT_EQ(replay->next_key(), 5u);
}

TEST(ReplayTest, RejectedAddsApplyNothing) {
  auto replay = MakeReplay(8, 0.6);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(3, Ids(0, 3), std::vector<double>{1.0, 2.0, 3.0}, &first).ok());
  const double total = replay->tree().Total();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::vector<double>& bad : {std::vector<double>{1.0, nan}, {1.0, -2.0}, {0.0, 1.0}, {inf, 1.0}}) {
    const Status status = replay->Add(2, Ids(3, 2), bad, &first);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("position"), std::string::npos);
  }
  EXPECT_EQ(replay->Add(2, Ids(3, 2), std::vector<double>{1.0}, &first).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(replay->Add(2, Ids(3, 1), {}, &first).code(), Status::Code::kInvalidArgument);  // bytes for 1 item
  EXPECT_EQ(replay->Add(9, Ids(3, 9), {}, &first).code(), Status::Code::kInvalidArgument);  // over capacity
  EXPECT_EQ(replay->next_key(), 3u);
  EXPECT_EQ(replay->tree().Total(), total);
  EXPECT_EQ(replay->counters().items_added, 3);
}

TEST(ReplayTest, ImportanceWeightsFollowTheFormula) {
  auto replay = MakeReplay(16, 0.7);
  const std::vector<double> priorities = {0.5, 1.0, 2.0, 4.0, 8.0, 0.25};
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(6, Ids(0, 6), priorities, &first).ok());
  SampleResult sample;
  const double beta = 0.4;
  ASSERT_TRUE(replay->Sample(64, beta, &sample).ok());
  const double total = replay->tree().Total();
  const double n = 6.0;
  const double min_leaf = std::pow(0.25, 0.7);
  const double max_weight = std::pow(n * min_leaf / total, -beta);
  for (size_t i = 0; i < sample.keys.size(); ++i) {
    ASSERT_LT(sample.keys[i], 6u);
    const double leaf = std::pow(priorities[sample.keys[i]], 0.7);
    EXPECT_EQ(sample.probabilities[i], leaf / total);
    EXPECT_DOUBLE_EQ(sample.weights[i], std::pow(n * leaf / total, -beta) / max_weight);
    EXPECT_LE(sample.weights[i], 1.0);
    EXPECT_EQ(sample.slots[i], static_cast<int64_t>(sample.keys[i]));
  }
  EXPECT_EQ(replay->Sample(0, beta, &sample).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(replay->Sample(4, -1.0, &sample).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(MakeReplay(4, 0.6)->Sample(4, beta, &sample).code(), Status::Code::kFailedPrecondition);
}

// Issue 25: with alpha 2 an update to 1e-200 made its leaf 0 (the power
// underflows), the tree's min 0, and every later weight 0. The leaf is
// clamped to the smallest normal double; every weight stays positive, the
// tiny item's is 1, and the others' follow the formula even where leaf / min
// overflows a double.
TEST(ReplayTest, APriorityWhosePowerUnderflowsLeavesEveryWeightPositive) {
  constexpr double kSmallestNormal = std::numeric_limits<double>::min();
  auto replay = MakeReplay(8, 2.0);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(8, Ids(0, 8), std::vector<double>{0.5, 1, 2, 3, 4, 5, 6, 7}, &first).ok());
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{1e-200}, &counts).ok());
  EXPECT_EQ(counts.applied, 1);
  EXPECT_EQ(Leaf(*replay, 0), kSmallestNormal);
  EXPECT_EQ(replay->tree().Min(), kSmallestNormal);
  const double beta = 0.4;
  std::vector<bool> seen(8, false);
  for (int round = 0; round < 20; ++round) {
    SampleResult sample;
    ASSERT_TRUE(replay->Sample(64, beta, &sample).ok());
    for (size_t i = 0; i < sample.keys.size(); ++i) {
      const double leaf = Leaf(*replay, sample.slots[i]);
      // The formula in logarithms: (leaf / 2^-1022)^-beta.
      const double expected = std::exp(-beta * (std::log(leaf) - std::log(kSmallestNormal)));
      ASSERT_GT(sample.weights[i], 0.0) << "key " << sample.keys[i];
      EXPECT_LE(sample.weights[i], 1.0);
      EXPECT_NEAR(sample.weights[i] / expected, 1.0, 1e-12) << "key " << sample.keys[i] << " leaf " << leaf;
      seen[sample.keys[i]] = true;
    }
  }
  for (uint64_t key = 1; key < 8; ++key) EXPECT_TRUE(seen[key]) << key;
}

// A removed item is gone (the one item model: no item keeps a slot with
// leaf 0): never drawn, and the min the weights divide by is the held
// items' alone. (It replaced the test of AddInPlace's failed fills, an
// operation the one item model no longer has: columns received into the
// step ring are checked before anything changes.)
TEST(ReplayTest, RemovedItemsAreNeverDrawnAndLeaveTheMinAlone) {
  auto replay = MakeReplay(16, 1.0);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(4, Ids(0, 4), std::vector<double>{0.5, 1, 2, 4}, &first).ok());
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{0}).ok());
  EXPECT_EQ(replay->size(), 3);
  EXPECT_EQ(replay->tree().Min(), 1.0);
  SampleResult sample;
  ASSERT_TRUE(replay->Sample(256, 1.0, &sample).ok());
  for (size_t i = 0; i < sample.keys.size(); ++i) {
    ASSERT_NE(sample.keys[i], 0u) << "a removed item was drawn";
    EXPECT_EQ(sample.weights[i], 1.0 / static_cast<double>(uint64_t{1} << (sample.keys[i] - 1)));
  }
}

TEST(ReplayTest, UpdatesForOverwrittenKeysAreDroppedAndCountedNeverAppliedToTheNewItem) {
  auto replay = MakeReplay(4, 1.0);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(4, Ids(0, 4), std::vector<double>{1, 1, 1, 1}, &first).ok());
  // Full: the FIFO remover takes keys 0 and 1; keys 4 and 5 take their slots (the last freed first).
  ASSERT_TRUE(replay->Add(2, Ids(4, 2), std::vector<double>{2, 2}, &first).ok());
  EXPECT_EQ(replay->SlotOf(4), 1);
  EXPECT_EQ(replay->SlotOf(5), 0);
  UpdateCounts counts;
  const std::vector<uint64_t> keys = {0, 5, 1, 3};
  ASSERT_TRUE(replay->UpdatePriorities(keys, std::vector<double>{50, 7, 60, 3}, &counts).ok());
  EXPECT_EQ(counts.applied, 2);
  EXPECT_EQ(counts.stale, 2);
  EXPECT_EQ(counts.dropped, 0);
  EXPECT_EQ(Leaf(*replay, 1), 2.0);  // slot 1 holds key 4: untouched by the updates for keys 0 and 1
  EXPECT_EQ(Leaf(*replay, 0), 7.0);  // key 5
  EXPECT_EQ(Leaf(*replay, 3), 3.0);
  EXPECT_EQ(replay->counters().stale_updates_dropped, 2);
}

TEST(ReplayTest, UnknownKeysAndBadPrioritiesRejectTheWholeUpdate) {
  auto replay = MakeReplay(8, 1.0);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(3, Ids(0, 3), std::vector<double>{1, 2, 3}, &first).ok());
  const double total = replay->tree().Total();
  UpdateCounts counts{-1, -1, -1};
  const Status unknown = replay->UpdatePriorities(std::vector<uint64_t>{1, 3}, std::vector<double>{5, 5}, &counts);
  EXPECT_EQ(unknown.code(), Status::Code::kNotFound);
  EXPECT_NE(unknown.message().find("key 3"), std::string::npos);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {nan, -1.0, 0.0, std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(replay->UpdatePriorities(std::vector<uint64_t>{0, 1}, std::vector<double>{5, bad}, &counts).code(),
              Status::Code::kInvalidArgument);
  }
  EXPECT_EQ(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{5, 6}, &counts).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(replay->tree().Total(), total);
  EXPECT_EQ(counts.applied, -1);  // untouched by a refused update
  EXPECT_EQ(replay->counters().priorities_updated, 0);
}

// After updates, draws follow the new priorities (alpha 1: P(i) = p_i / sum p).
TEST(ReplayTest, SamplingFrequenciesFollowUpdatedPriorities) {
  auto replay = MakeReplay(8, 1.0);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(8, Ids(0, 8), {}, &first).ok());
  const std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<double> priorities = {1, 2, 3, 4, 5, 6, 7, 8};
  UpdateCounts updated;
  ASSERT_TRUE(replay->UpdatePriorities(keys, priorities, &updated).ok());
  std::vector<int64_t> counts(8, 0);
  SampleResult sample;
  const int rounds = 500, batch = 32;
  for (int r = 0; r < rounds; ++r) {
    ASSERT_TRUE(replay->Sample(batch, 0.5, &sample).ok());
    for (uint64_t key : sample.keys) ++counts[key];
  }
  double chi_square = 0.0;
  for (int i = 0; i < 8; ++i) {
    const double expected = rounds * batch * priorities[i] / 36.0;
    chi_square += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  EXPECT_LT(chi_square, 24.32);  // chi-square, 7 degrees of freedom, p = 0.001
}

}  // namespace
}  // namespace perserve::replay
