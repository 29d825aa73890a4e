// A learner's sample over several shards of a table drawn by its own
// selector (uniform, fifo with max_times_sampled): the batch split into
// parts by the shards' sizes, each drawn through a plain sample request
// (ShardSampler's parts, client/src/shard_parts.cc), over the loopback
// shards of sharded_loopback.h.
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "client/sharded_loopback.h"

namespace perserve::client_internal {
namespace {

using namespace sharded_loopback;  // NOLINT: the fixture and its shards

class ShardPartsLoopbackTest : public ShardSamplerLoopbackTest {
 protected:
  // The shards' one table as the learner is told of it.
  static std::vector<proto::TableSchemas> Table(const char* sampler, int64_t max_times_sampled = 0) {
    const Schema schema{{Column{"id", DType::kInt64, {}}}};
    return {proto::TableSchemas{"default", false, schema, {}, sampler, false, max_times_sampled}};
  }

  // The id column of position i (Add stores the shard's index in it).
  static int64_t IdAt(const SampleBatch& batch, size_t i) {
    int64_t id = 0;
    std::memcpy(&id, batch.columns[0].data() + i * sizeof(int64_t), sizeof id);
    return id;
  }
};

// A uniform table over two shards holding 300 and 100 items: every sample
// goes as plain sample requests naming the table, a part a shard, and is
// uniform over the 400 items (shard 0 draws 3/4 of the positions), weights
// 1 and probability 1/400 each, in both modes.
TEST_F(ShardPartsLoopbackTest, AUniformTableIsUniformOverTheUnionOfTheShards) {
  for (const bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact totals" : "sizes of the last replies");
    StartShards(2, 1024, MinSize(10), table::SelectorKind::kUniform);
    Add(0, 300, 1.0);
    Add(1, 100, 1.0);
    std::unique_ptr<LearnerClient> learner = Learner(exact, /*prefetch=*/0, Table("uniform"));
    constexpr int kRounds = 200;
    constexpr int kBatch = 64;
    int from_shard_0 = 0;
    std::map<uint64_t, int> draws;
    for (int round = 0; round < kRounds; ++round) {
      SampleBatch batch;
      const Status sampled = learner->Sample(kBatch, 0.4, &batch, 5.0);
      ASSERT_TRUE(sampled.ok()) << "round " << round << ": " << sampled.ToString();
      ASSERT_EQ(batch.size, kBatch);
      for (size_t i = 0; i < batch.keys.size(); ++i) {
        const int shard = proto::ShardOfKey(batch.keys[i]);
        ASSERT_LT(shard, 2);
        EXPECT_EQ(IdAt(batch, i), shard) << "position " << i << ": its row is its shard's";
        EXPECT_LT(proto::LocalKey(batch.keys[i]), shard == 0 ? 300u : 100u);
        EXPECT_EQ(batch.weights[i], 1.0);
        EXPECT_DOUBLE_EQ(batch.probabilities[i], 1.0 / 400);
        from_shard_0 += shard == 0;
        ++draws[batch.keys[i]];
      }
    }
    // 12800 draws: shard 0's share 0.75 (sd 0.004); each item 32 on average (sd 5.6).
    EXPECT_NEAR(static_cast<double>(from_shard_0) / (kRounds * kBatch), 0.75, 0.02);
    EXPECT_EQ(draws.size(), 400u);
    for (const auto& [key, count] : draws) {
      EXPECT_GT(count, 5) << "key " << key;
      EXPECT_LT(count, 70) << "key " << key;
    }
    // Parts are plain sample requests of the table; no shard was asked to draw at fractions.
    int64_t asked = 0;
    for (const auto& [shard, request] : connection_->parts_sent()) {
      EXPECT_EQ(request.table, 0);
      EXPECT_GT(request.batch_size, 0);
      asked += request.batch_size;
    }
    EXPECT_EQ(asked, kRounds * kBatch);
    for (const proto::ShardSampleRequest& request : connection_->sent()) EXPECT_EQ(request.count, 0);
    ReplayInfo info;
    ASSERT_TRUE(learner->Info(&info).ok());
    EXPECT_EQ(info.size, 400);
    EXPECT_TRUE(learner->Close().ok());
    shards_.clear();
  }
}

// A shard holding none of the table's items (not ready) gets no part.
TEST_F(ShardPartsLoopbackTest, AnEmptyShardGetsNoPart) {
  StartShards(2, 1024, MinSize(10), table::SelectorKind::kUniform);
  Add(0, 50, 1.0);
  std::unique_ptr<LearnerClient> learner = Learner(false, 0, Table("uniform"));
  for (int round = 0; round < 3; ++round) {
    SampleBatch batch;
    const Status sampled = learner->Sample(32, 0.4, &batch, 1.0);
    ASSERT_TRUE(sampled.ok()) << sampled.ToString();
    EXPECT_EQ(ShardsIn(batch, 0), 32);
  }
  for (const auto& [shard, request] : connection_->parts_sent()) EXPECT_EQ(shard, 0);
  EXPECT_TRUE(learner->Close().ok());
}

// A queue (fifo, max_times_sampled 1) over two shards of 100 items: every
// item is drawn once, each shard's oldest first (its keys 0, 1, 2, ... in
// the order the samples return them).
TEST_F(ShardPartsLoopbackTest, AQueueOverShardsDrawsEachShardsItemsOnceOldestFirst) {
  StartShards(2, 1024, MinSize(1), table::SelectorKind::kFifo, /*max_times_sampled=*/1);
  Add(0, 100, 1.0);
  Add(1, 100, 1.0);
  std::unique_ptr<LearnerClient> learner = Learner(false, 0, Table("fifo", 1));
  std::vector<uint64_t> next(2, 0);
  for (int round = 0; round < 8; ++round) {
    SampleBatch batch;
    const Status sampled = learner->Sample(16, 0.4, &batch, 5.0);
    ASSERT_TRUE(sampled.ok()) << "round " << round << ": " << sampled.ToString();
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      const size_t shard = static_cast<size_t>(proto::ShardOfKey(batch.keys[i]));
      ASSERT_LT(shard, 2u);
      EXPECT_EQ(proto::LocalKey(batch.keys[i]), next[shard]++) << "round " << round << ", position " << i;
      EXPECT_EQ(batch.weights[i], 1.0);
    }
  }
  EXPECT_EQ(next[0] + next[1], 128u);
  EXPECT_GT(next[0], 0u);
  EXPECT_GT(next[1], 0u);
  ReplayInfo info;
  ASSERT_TRUE(learner->Info(&info).ok());
  EXPECT_EQ(info.size, 200 - 128);
  EXPECT_TRUE(learner->Close().ok());
}

// A queue's part that its shard cannot draw yet waits, as a plain sample
// waits, until the shard holds the draws: each shard has 10 items and a
// sample of 20 splits them 10 and 10 only by chance.
TEST_F(ShardPartsLoopbackTest, APartThatCannotBeDrawnYetWaits) {
  StartShards(2, 1024, MinSize(1), table::SelectorKind::kFifo, /*max_times_sampled=*/1);
  Add(0, 10, 1.0);
  Add(1, 10, 1.0);
  int steps = 0;
  between_steps_ = [&] {
    if (++steps != 50) return;
    Add(0, 20, 1.0);
    Add(1, 20, 1.0);
  };
  std::unique_ptr<LearnerClient> learner = Learner(false, 0, Table("fifo", 1));
  SampleBatch batch;
  const Status sampled = learner->Sample(20, 0.4, &batch, 5.0);
  ASSERT_TRUE(sampled.ok()) << sampled.ToString();
  EXPECT_NE(ShardsIn(batch, 0), 10) << "this seed's split is not 10 and 10";
  EXPECT_GE(steps, 50) << "the larger part waited for the new items";
  std::set<uint64_t> keys(batch.keys.begin(), batch.keys.end());
  EXPECT_EQ(keys.size(), 20u);
  between_steps_ = nullptr;
  EXPECT_TRUE(learner->Close().ok());
}

// Shard 1's actor closes and its rate limiter runs out: its part is refused
// as never servable, it leaves the plan, and that part alone is drawn again
// over shard 0; the parts already drawn are kept (every item shard 0 drew is
// in a returned batch), and no sample fails.
TEST_F(ShardPartsLoopbackTest, ARefusedPartAloneIsDrawnAgainOverTheOtherShards) {
  StartShards(2, 1024, MinSize(10), table::SelectorKind::kUniform);
  service::ServiceOptions limited = MinSize(10);
  limited.samples_per_insert = 1.0;  // shard 1 serves about its 100 inserts and its buffer
  limited.error_buffer = 20.0;
  limited.shard = 1;
  limited.shards = 2;
  limited.stats_interval_seconds = 0.0;
  shards_[1].service =
      std::make_unique<service::ReplayService>(shards_[1].replay.get(), shards_[1].transport.get(), limited);
  Add(0, 100, 1.0);
  Add(1, 100, 1.0);
  CloseActor(1);
  std::unique_ptr<LearnerClient> learner = Learner(false, 0, Table("uniform"));
  int64_t from_shard_0 = 0, from_shard_1 = 0, late_from_shard_1 = 0;
  for (int round = 0; round < 20; ++round) {
    SampleBatch batch;
    const Status sampled = learner->Sample(32, 0.4, &batch, 5.0);
    ASSERT_TRUE(sampled.ok()) << "round " << round << ": " << sampled.ToString();
    ASSERT_EQ(batch.keys.size(), 32u);
    from_shard_0 += ShardsIn(batch, 0);
    from_shard_1 += ShardsIn(batch, 1);
    if (round >= 15) late_from_shard_1 += ShardsIn(batch, 1);
  }
  EXPECT_EQ(late_from_shard_1, 0) << "shard 1 has left the plan";
  EXPECT_GT(from_shard_1, 50);
  EXPECT_EQ(shards_[0].replay->items().counters().items_sampled, from_shard_0);
  EXPECT_EQ(shards_[1].replay->items().counters().items_sampled, from_shard_1);
  EXPECT_TRUE(learner->Close().ok());
}

// A prioritized table with max_times_sampled is split by the shards' totals:
// a shard holding 9/10 of the mass draws 9/10 of the positions, though it
// holds half the items.
TEST_F(ShardPartsLoopbackTest, APrioritizedTableWithMaxTimesSampledIsSplitByTotals) {
  StartShards(2, 4096, MinSize(1), table::SelectorKind::kPrioritized, /*max_times_sampled=*/1000);
  Add(0, 1000, 9.0);
  Add(1, 1000, 1.0);
  std::unique_ptr<LearnerClient> learner = Learner(false, 0, Table("prioritized", 1000));
  int from_shard_0 = 0;
  for (int round = 0; round < 50; ++round) {
    SampleBatch batch;
    const Status sampled = learner->Sample(64, 0.4, &batch, 5.0);
    ASSERT_TRUE(sampled.ok()) << sampled.ToString();
    from_shard_0 += ShardsIn(batch, 0);
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      // Each item drawn with probability leaf / global total, 9 / 10000 or 1 / 10000 (totals nearly unchanged).
      const double expected = proto::ShardOfKey(batch.keys[i]) == 0 ? 9.0 / 10000 : 1.0 / 10000;
      EXPECT_NEAR(batch.probabilities[i], expected, expected * 1e-9);
    }
  }
  EXPECT_NEAR(from_shard_0 / 3200.0, 0.9, 0.03);
  EXPECT_TRUE(learner->Close().ok());
}

}  // namespace
}  // namespace perserve::client_internal
