// A learner's sample over several shards (ShardSampler, issue 24's findings
// 3, 5 and 7) without MPI, over the loopback shards of sharded_loopback.h.
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "client/sharded_loopback.h"

namespace perserve::client_internal {
namespace {

using namespace sharded_loopback;  // NOLINT: the fixture and its shards

// Finding 5: shard 0 holds 200 items, shard 1 none (its actor still open).
// The first sample draws over shard 0 at once, in both modes; it used to wait
// for every shard's probe and failed DEADLINE_EXCEEDED.
TEST_F(ShardSamplerLoopbackTest, TheFirstSampleDrawsOverTheReadyShardsWithoutWaitingForTheOthers) {
  for (const bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact totals" : "totals of the last replies");
    StartShards(2, 1024, MinSize(100));
    Add(0, 200, 1.0);
    std::unique_ptr<LearnerClient> learner = Learner(exact);
    for (int round = 0; round < 3; ++round) {
      SampleBatch batch;
      const Status sampled = learner->Sample(32, 0.4, &batch, /*timeout_seconds=*/1.0);
      ASSERT_TRUE(sampled.ok()) << sampled.ToString();
      EXPECT_EQ(ShardsIn(batch, 0), 32);
    }
    // Once shard 1 is ready it takes part (the probe left waiting on it is taken).
    Add(1, 200, 1.0);
    int from_shard_1 = 0;
    for (int round = 0; round < 4; ++round) {
      SampleBatch batch;
      const Status sampled = learner->Sample(32, 0.4, &batch, 1.0);
      ASSERT_TRUE(sampled.ok()) << sampled.ToString();
      from_shard_1 += ShardsIn(batch, 1);
    }
    EXPECT_GT(from_shard_1, 0);
    EXPECT_TRUE(learner->Close().ok());
    shards_.clear();
  }
}

// Before any shard is ready the sample waits, and draws over the first that is.
TEST_F(ShardSamplerLoopbackTest, ASampleWaitsForTheFirstShardToBeReady) {
  StartShards(3, 1024, MinSize(100));
  int steps = 0;
  between_steps_ = [&] {
    if (++steps == 50) Add(2, 150, 1.0);
  };
  std::unique_ptr<LearnerClient> learner = Learner(false);
  SampleBatch batch;
  const Status sampled = learner->Sample(16, 0.4, &batch);
  ASSERT_TRUE(sampled.ok()) << sampled.ToString();
  EXPECT_EQ(ShardsIn(batch, 2), 16);
  EXPECT_GE(steps, 50);
  EXPECT_TRUE(learner->Close().ok());
}

// Finding 7: one timeout budget for the whole sample. No shard is ready when
// the sample is sent; both become ready 0.6 s later, so the parts sent then
// carry what is left of the second (they used to carry the whole).
TEST_F(ShardSamplerLoopbackTest, ASamplesTimeoutIsOneBudgetOverItsRounds) {
  StartShards(2, 1024, MinSize(100));
  const Clock::time_point start = Clock::now();
  bool added = false;
  between_steps_ = [&] {
    if (added || Clock::now() < start + std::chrono::milliseconds(600)) return;
    added = true;
    Add(0, 150, 1.0);
    Add(1, 150, 1.0);
  };
  std::unique_ptr<LearnerClient> learner = Learner(true);
  SampleBatch batch;
  const Status sampled = learner->Sample(16, 0.4, &batch, /*timeout_seconds=*/1.0);
  ASSERT_TRUE(sampled.ok()) << sampled.ToString();
  int parts = 0;
  for (const proto::ShardSampleRequest& request : connection_->sent()) {
    if (request.count == 0) continue;
    ++parts;
    EXPECT_GT(request.timeout_seconds, 0.0);
    EXPECT_LT(request.timeout_seconds, 0.5) << "a part sent 0.6 s into a 1 s budget";
  }
  EXPECT_GT(parts, 0);
  EXPECT_TRUE(learner->Close().ok());
}

// The budget counts waiting, not the time a prefetched sample spends in
// flight while the learner trains: in exact mode its parts are sent when it
// is received, 0.3 s after it was requested with a timeout of 0.2 s.
TEST_F(ShardSamplerLoopbackTest, APrefetchedSamplesBudgetStartsWhenItWaits) {
  StartShards(2, 1024, MinSize(10));
  Add(0, 100, 1.0);
  Add(1, 100, 1.0);
  std::unique_ptr<LearnerClient> learner = Learner(/*exact_totals=*/true, /*prefetch=*/1);
  for (int step = 0; step < 3; ++step) {
    SampleBatch batch;
    const Status sampled = learner->Sample(16, 0.4, &batch, /*timeout_seconds=*/0.2);
    ASSERT_TRUE(sampled.ok()) << "step " << step << ": " << sampled.ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // training
  }
  EXPECT_TRUE(learner->Close().ok());
}

// Finding 3: shards with a rate limiter at the end of a job. Shard 1's actor
// closes; once its limiter refuses its part for good, it leaves the plan and
// every sample is drawn over shard 0 (it used to fail every other sample,
// FAILED_PRECONDITION); once no shard can serve, the sample fails so.
TEST_F(ShardSamplerLoopbackTest, AShardThatCanNeverServeLeavesThePlanAndTheOthersServe) {
  for (const bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact totals" : "totals of the last replies");
    service::ServiceOptions options = MinSize(10);
    options.samples_per_insert = 1.0;  // a shard serves at most its inserts + 40 items
    options.error_buffer = 50.0;
    StartShards(2, 2048, options);
    Add(0, 1000, 10.0);  // total 10000
    Add(1, 20, 500.0);   // total 10000: about half of every sample, 60 items in all
    CloseActor(1);
    std::unique_ptr<LearnerClient> learner = Learner(exact);
    int failed = 0, from_shard_1_late = 0;
    for (int round = 0; round < 20; ++round) {
      SampleBatch batch;
      const Status sampled = learner->Sample(32, 0.4, &batch, 5.0);
      if (!sampled.ok()) {
        ++failed;
        ADD_FAILURE() << "round " << round << ": " << sampled.ToString();
        continue;
      }
      if (round >= 10) from_shard_1_late += ShardsIn(batch, 1);
    }
    EXPECT_EQ(failed, 0);
    EXPECT_EQ(from_shard_1_late, 0) << "shard 1 has left the plan";
    // Shard 0's actor closes too: it serves until its limiter is spent, then
    // the sample fails FAILED_PRECONDITION naming both shards.
    CloseActor(0);
    Status last;
    for (int round = 0; round < 60 && last.ok(); ++round) {
      SampleBatch batch;
      last = learner->Sample(32, 0.4, &batch, 5.0);
    }
    EXPECT_EQ(last.code(), Status::Code::kFailedPrecondition) << last.ToString();
    EXPECT_NE(last.message().find("shard 0: "), std::string::npos) << last.message();
    EXPECT_NE(last.message().find("shard 1: "), std::string::npos) << last.message();
    EXPECT_TRUE(learner->Close().ok());
    shards_.clear();
  }
}

// Found by the simulation (seeds 3255, 3446, 4638, 6357): the only ready
// shard refuses its part as never servable (its actor closed, its rate
// limiter spent) while another shard, its actor still open, is not ready yet.
// The sample waits for that shard, as a sample does before any shard is
// ready; it used to draw again at once over the shards ready then (none) and
// fail FAILED_PRECONDITION.
TEST_F(ShardSamplerLoopbackTest, ASampleWhoseOnlyReadyShardLeavesThePlanWaitsForAnotherToBeReady) {
  for (const bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact totals" : "totals of the last replies");
    service::ServiceOptions options = MinSize(10);
    options.samples_per_insert = 1.0;  // a shard serves at most its inserts + 5 items
    options.error_buffer = 5.0;
    StartShards(2, 1024, options);
    Add(0, 20, 1.0);
    CloseActor(0);  // shard 0 can serve 25 items, never 32; shard 1's actor is open, its replay empty
    int steps = 0;
    between_steps_ = [&] {
      if (++steps == 50) Add(1, 100, 1.0);
    };
    std::unique_ptr<LearnerClient> learner = Learner(exact);
    SampleBatch batch;
    const Status sampled = learner->Sample(32, 0.4, &batch, /*timeout_seconds=*/10.0);
    ASSERT_TRUE(sampled.ok()) << sampled.ToString();
    EXPECT_EQ(ShardsIn(batch, 1), 32);
    EXPECT_GE(steps, 50);
    between_steps_ = nullptr;
    EXPECT_TRUE(learner->Close().ok());
    shards_.clear();
  }
}

// Finding 7: a call with another beta (annealed, every call) returns the
// prefetched samples with their weights for the new beta; they used to be
// received and dropped, every one of them sampled (and rate limited) for
// nothing. On one server (weights w^(beta'/beta)) and over two.
TEST_F(ShardSamplerLoopbackTest, ANewBetaKeepsThePrefetchedSamplesAndWeighsThemForIt) {
  for (const int shards : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} shards", shards));
    StartShards(shards, 1024, MinSize(10));
    for (int s = 0; s < shards; ++s) {
      for (int priority = 1; priority <= 20; ++priority) Add(s, 5, priority);  // unequal leaves (alpha 1)
    }
    std::unique_ptr<LearnerClient> learner = Learner(false, /*prefetch=*/2);
    SampleBatch batch;
    ASSERT_TRUE(learner->Sample(32, 0.4, &batch).ok());
    const double beta = 0.7;
    ASSERT_TRUE(learner->Sample(32, beta, &batch).ok());
    double min_leaf = std::numeric_limits<double>::infinity();
    for (const Shard& shard : shards_) min_leaf = std::min(min_leaf, shard.replay->items().tree().Min());
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      const Shard& shard = shards_[static_cast<size_t>(proto::ShardOfKey(batch.keys[i]))];
      double leaf = 0.0;
      const int64_t slot = shard.replay->items().SlotOf(proto::LocalKey(batch.keys[i]));
      ASSERT_GE(slot, 0) << "item " << i << " is not held";
      ASSERT_TRUE(shard.replay->items().tree().Get(std::span(&slot, 1), std::span(&leaf, 1)).ok());
      EXPECT_NEAR(batch.weights[i], std::pow(leaf / min_leaf, -beta), 1e-12) << "item " << i;
    }
    EXPECT_TRUE(learner->Close().ok());
    // Requests sent: 1 + 2 prefetched, then 1 more to keep 2 in flight (each
    // sampled by the servers: a dropped one was too).
    int64_t sampled = 0;
    for (const Shard& shard : shards_) sampled += shard.replay->items().counters().items_sampled;
    EXPECT_EQ(sampled, 4 * 32);
    shards_.clear();
  }
}

// Each table has its own sampler over the shards: every shard request (a
// state request, a part, an info) names the table, and one table's shard
// states are not another's. These one-table shards refuse a second table.
TEST_F(ShardSamplerLoopbackTest, ShardRequestsNameTheirTable) {
  StartShards(2, 1024, MinSize(1));
  Add(0, 50, 1.0);
  Add(1, 50, 1.0);
  ClientOptions options;
  options.shard_seed = 5;
  auto connection = std::make_unique<ShardedLoopbackConnection>(&shards_, nullptr);
  const Schema schema{{Column{"id", DType::kInt64, {}}}};
  connection->set_tables({proto::TableSchemas{"default", false, schema, {}},
                          proto::TableSchemas{"second", false, schema, {}}});
  connection_ = connection.get();
  std::unique_ptr<LearnerClient> learner = TestAccess::Learner(std::move(connection), options);
  SampleBatch batch;
  ASSERT_TRUE(learner->Sample("default", 16, 0.4, &batch).ok());
  EXPECT_EQ(batch.table, "default");
  ReplayInfo info;
  ASSERT_TRUE(learner->Info(&info).ok());
  EXPECT_EQ(info.size, 100);
  const size_t default_requests = connection_->sent().size();
  for (const proto::ShardSampleRequest& request : connection_->sent()) EXPECT_EQ(request.table, 0);

  const Status other_info = learner->Info("second", &info);
  EXPECT_EQ(other_info.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(other_info.message().find("table 1"), std::string::npos)
      << other_info.ToString();
  const Status other = learner->Sample("second", 16, 0.4, &batch);
  EXPECT_EQ(other.code(), Status::Code::kInvalidArgument) << other.ToString();
  ASSERT_GT(connection_->sent().size(), default_requests + 2);
  for (size_t i = default_requests; i < connection_->sent().size(); ++i) EXPECT_EQ(connection_->sent()[i].table, 1);
  // The default table's sampler still knows its shards ready: a part a shard at once.
  const size_t before = connection_->sent().size();
  ASSERT_TRUE(learner->Sample(16, 0.4, &batch).ok());
  EXPECT_EQ(connection_->sent().size(), before + 2);
  EXPECT_TRUE(learner->Close().ok());
}

}  // namespace
}  // namespace perserve::client_internal
