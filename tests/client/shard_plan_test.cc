// PlanShardSample: a batch's strata split over shards by their totals.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "client/src/shard_sampler.h"

namespace perserve::client_internal {
namespace {

ShardState Ready(double total) {
  ShardState state;
  state.ready = true;
  state.size = 100;
  state.total = total;
  state.min_leaf = 1.0;
  return state;
}

TEST(ShardPlanTest, EachShardGetsItsShareOfTheStrataWithinTwoAndOnAverage) {
  // Stratified: a shard holding a fraction f of the total gets f B strata
  // but for the two strata its share's ends cut (so within 2), and exactly
  // f B on average.
  const std::vector<ShardState> shards = {Ready(1.0), Ready(3.0), Ready(0.5), Ready(10.0)};
  std::mt19937_64 rng(7);
  std::vector<double> mean(shards.size(), 0.0);
  constexpr int kRounds = 2000;
  for (int round = 0; round < kRounds; ++round) {
    ShardPlan plan;
    ASSERT_TRUE(PlanShardSample(512, shards, &rng, &plan).ok());
    ASSERT_EQ(plan.shard_of.size(), 512u);
    EXPECT_DOUBLE_EQ(plan.total, 14.5);
    size_t taken = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
      const double share = 512.0 * shards[s].total / 14.5;
      const double got = static_cast<double>(plan.fractions[s].size());
      EXPECT_LT(std::abs(got - share), 2.0) << "shard " << s;
      mean[s] += got / kRounds;
      for (double f : plan.fractions[s]) {
        EXPECT_GE(f, 0.0);
        EXPECT_LT(f, 1.0);
      }
      taken += plan.fractions[s].size();
    }
    EXPECT_EQ(taken, 512u);
  }
  for (size_t s = 0; s < shards.size(); ++s) EXPECT_NEAR(mean[s], 512.0 * shards[s].total / 14.5, 0.05) << s;
}

TEST(ShardPlanTest, FractionsAreUniformInsideEachShard) {
  // One shard of two, fraction by fraction: the draws cover [0, 1) evenly
  // (ten bins, chi-square with a generous bound).
  const std::vector<ShardState> shards = {Ready(2.0), Ready(2.0)};
  std::mt19937_64 rng(11);
  std::vector<double> bins(10, 0.0);
  double n = 0;
  for (int round = 0; round < 200; ++round) {
    ShardPlan plan;
    ASSERT_TRUE(PlanShardSample(100, shards, &rng, &plan).ok());
    for (double f : plan.fractions[1]) {
      bins[static_cast<size_t>(f * 10)] += 1;
      n += 1;
    }
  }
  double chi2 = 0;
  for (double count : bins) chi2 += (count - n / 10) * (count - n / 10) / (n / 10);
  EXPECT_LT(chi2, 40.0);
}

TEST(ShardPlanTest, TheOrderIsShuffledAndMatchesTheFractions) {
  const std::vector<ShardState> shards = {Ready(1.0), Ready(1.0)};
  std::mt19937_64 rng(3);
  ShardPlan plan;
  ASSERT_TRUE(PlanShardSample(64, shards, &rng, &plan).ok());
  // Sorted strata would put every shard-0 position first.
  bool interleaved = false;
  for (size_t i = 1; i < plan.shard_of.size(); ++i) interleaved |= plan.shard_of[i] < plan.shard_of[i - 1];
  EXPECT_TRUE(interleaved);
  size_t zeros = 0;
  for (int s : plan.shard_of) zeros += s == 0;
  EXPECT_EQ(zeros, plan.fractions[0].size());
}

TEST(ShardPlanTest, ShardsNotReadyOrEmptyTakeNoStrata) {
  std::vector<ShardState> shards = {Ready(5.0), Ready(0.0), Ready(5.0)};
  shards[2].ready = false;  // below its minimum size
  std::mt19937_64 rng(5);
  ShardPlan plan;
  ASSERT_TRUE(PlanShardSample(100, shards, &rng, &plan).ok());
  EXPECT_EQ(plan.fractions[0].size(), 100u);
  EXPECT_TRUE(plan.fractions[1].empty());
  EXPECT_TRUE(plan.fractions[2].empty());
  EXPECT_DOUBLE_EQ(plan.totals[2], 0.0);
}

TEST(ShardPlanTest, NoShardReadyIsAFailedPreconditionSayingWhy) {
  std::vector<ShardState> shards = {Ready(5.0), Ready(5.0)};
  shards[0].ready = false;
  shards[0].size = 12;
  shards[1].ready = false;
  shards[1].why_not = "no actor remains open";
  std::mt19937_64 rng(5);
  ShardPlan plan;
  const Status status = PlanShardSample(8, shards, &rng, &plan);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("shard 0: holds 12 items"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("shard 1: no actor remains open"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace perserve::client_internal
