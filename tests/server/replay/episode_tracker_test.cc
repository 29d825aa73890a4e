#include <cstring>

#include <gtest/gtest.h>

#include "replay/episode_tracker.h"

namespace perserve::replay {
namespace {

const Schema kSchema{{{"obs", DType::kUInt8, {3}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};

std::vector<std::byte> Batch(const std::vector<float>& rewards, const std::vector<uint8_t>& dones) {
  std::vector<std::byte> bulk(rewards.size() * 3, std::byte{9});
  const auto r = std::as_bytes(std::span(rewards));
  const auto d = std::as_bytes(std::span(dones));
  bulk.insert(bulk.end(), r.begin(), r.end());
  bulk.insert(bulk.end(), d.begin(), d.end());
  return bulk;
}

TEST(EpisodeTrackerTest, EpisodesSpanBatchesPerActor) {
  EpisodeTracker tracker(kSchema, "reward", "done", 2);
  ASSERT_TRUE(tracker.enabled());
  tracker.Observe(0, 3, Batch({1, 2, 3}, {0, 0, 0}));
  tracker.Observe(1, 2, Batch({10, 20}, {0, 1}));  // another actor's episode: 30 over 2 steps
  tracker.Observe(0, 3, Batch({4, 5, 7}, {1, 0, 0}));  // stream 0's episode ends: 1+2+3+4 = 10 over 4 steps
  EpisodeSummary summary = tracker.TakeInterval();
  EXPECT_EQ(summary.episodes, 2);
  EXPECT_DOUBLE_EQ(summary.mean_return, 20.0);
  EXPECT_DOUBLE_EQ(summary.max_return, 30.0);
  EXPECT_DOUBLE_EQ(summary.mean_length, 3.0);
  tracker.Observe(0, 1, Batch({-1}, {1}));  // 5 + 7 - 1 = 11 over 3 steps
  summary = tracker.TakeInterval();
  EXPECT_EQ(summary.episodes, 1);
  EXPECT_DOUBLE_EQ(summary.mean_return, 11.0);
  EXPECT_DOUBLE_EQ(summary.mean_length, 3.0);
  EXPECT_EQ(tracker.TakeInterval().episodes, 0);
}

TEST(EpisodeTrackerTest, AStepStreamsBootstrapStepEndsItsEpisodeUncounted) {
  EpisodeTracker steps(kSchema, "reward", "done", 1, /*bootstrap_steps=*/true);
  steps.Observe(0, 4, Batch({1, 2, 3, 100}, {0, 0, 0, 2}));  // cut off after 3 steps; step 4 the bootstrap step
  steps.Observe(0, 2, Batch({5, 6}, {0, 1}));
  EpisodeSummary summary = steps.TakeInterval();
  EXPECT_EQ(summary.episodes, 2);
  EXPECT_DOUBLE_EQ(summary.max_return, 11.0);
  EXPECT_DOUBLE_EQ(summary.mean_return, 8.5);
  EXPECT_DOUBLE_EQ(summary.mean_length, 2.5);
  // Transitions: 2 is a done like any other.
  EpisodeTracker transitions(kSchema, "reward", "done", 1);
  transitions.Observe(0, 4, Batch({1, 2, 3, 100}, {0, 0, 0, 2}));
  EXPECT_DOUBLE_EQ(transitions.TakeInterval().mean_return, 106.0);
}

TEST(EpisodeTrackerTest, OffWithoutScalarRewardAndDoneColumns) {
  EXPECT_FALSE(EpisodeTracker(kSchema, "return", "done", 1).enabled());
  EXPECT_FALSE(EpisodeTracker(kSchema, "obs", "done", 1).enabled());  // not a scalar
  EpisodeTracker off(kSchema, "reward", "terminal", 1);
  off.Observe(0, 1, Batch({1}, {1}));
  EXPECT_EQ(off.TakeInterval().episodes, 0);
}

}  // namespace
}  // namespace perserve::replay
