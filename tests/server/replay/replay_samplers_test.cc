// Replay with each sampler of issue 34 (ReplayOptions::sampler): the draws,
// their probabilities and weights, which updates a table takes, and the
// options Create refuses. The default (prioritized) is replay_test's.
#include <algorithm>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "server/replay/replay_test_util.h"

namespace perserve::replay {
namespace {

using replay_test::Ids;
using table::SelectorKind;

std::unique_ptr<Replay> MakeTable(SelectorKind sampler, int64_t capacity = 8, int64_t max_times_sampled = 0) {
  ReplayOptions options{capacity, 0.6, tree::Device::kCpu, 17};
  options.sampler = sampler;
  options.max_times_sampled = max_times_sampled;
  return replay_test::MakeReplay(options);
}

// Adds items with these priorities (keys 0, 1, ... on a fresh table).
void AddWith(Replay& replay, const std::vector<double>& priorities) {
  uint64_t first = 0;
  const int64_t count = static_cast<int64_t>(priorities.size());
  ASSERT_TRUE(replay.Add(count, Ids(static_cast<int64_t>(replay.next_key()), count), priorities, &first).ok());
}

SampleResult Draw(Replay& replay, int64_t batch, double beta = 0.4) {
  SampleResult result;
  const Status status = replay.Sample(batch, beta, &result);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return result;
}

TEST(ReplaySamplersTest, CreateRefusesBadOptionsAndTakesAlphaWithAnySampler) {
  std::unique_ptr<Replay> replay;
  ReplayOptions options{8, 0.6, tree::Device::kCpu, 1};
  options.max_times_sampled = -1;
  EXPECT_EQ(Replay::Create(options, replay_test::IdSchema(), &replay).code(), Status::Code::kInvalidArgument);
  options.max_times_sampled = 0;
  options.sampler = static_cast<SelectorKind>(99);
  EXPECT_EQ(Replay::Create(options, replay_test::IdSchema(), &replay).code(), Status::Code::kInvalidArgument);
  options.sampler = SelectorKind::kUniform;
  options.remover = static_cast<RemoverKind>(7);
  EXPECT_EQ(Replay::Create(options, replay_test::IdSchema(), &replay).code(), Status::Code::kInvalidArgument);
  options.remover = RemoverKind::kLowestPriorityFirst;
  options.alpha = 0.9;
  options.max_times_sampled = 3;
  EXPECT_TRUE(Replay::Create(options, replay_test::IdSchema(), &replay).ok());
}

TEST(ReplaySamplersTest, UniformDrawsEveryItemAlikeWithWeightOne) {
  auto replay = MakeTable(SelectorKind::kUniform);
  AddWith(*replay, {1.0, 100.0, 0.01, 5.0});  // priorities do not matter
  std::map<uint64_t, int> drawn;
  constexpr int kCalls = 100, kBatch = 40;
  int even_batches = 0;  // each key exactly 10 times: what stratified fractions would always give
  for (int call = 0; call < kCalls; ++call) {
    const SampleResult result = Draw(*replay, kBatch);
    std::map<uint64_t, int> in_batch;
    for (const uint64_t key : result.keys) ++in_batch[key];
    even_batches += std::all_of(in_batch.begin(), in_batch.end(), [](const auto& k) { return k.second == 10; }) &&
                    in_batch.size() == 4;
    for (int i = 0; i < kBatch; ++i) {
      ++drawn[result.keys[i]];
      EXPECT_EQ(result.probabilities[i], 0.25);
      EXPECT_EQ(result.weights[i], 1.0);
      EXPECT_EQ(replay->KeyAt(result.slots[i]), result.keys[i]);
    }
  }
  // 4000 draws, 1000 expected of each; sd ~27, so 150 is past 5 sd.
  ASSERT_EQ(drawn.size(), 4u);
  for (const auto& [key, times] : drawn) EXPECT_NEAR(times, 1000, 150) << "key " << key;
  // Independent fractions: an even batch has chance 0.003 (40! / (10!^4 4^40)).
  EXPECT_LT(even_batches, 5);
  // The same seed and calls give the same draws.
  auto twin = MakeTable(SelectorKind::kUniform);
  AddWith(*twin, {1.0, 100.0, 0.01, 5.0});
  auto again = MakeTable(SelectorKind::kUniform);
  AddWith(*again, {1.0, 100.0, 0.01, 5.0});
  const SampleResult first = Draw(*twin, 64);
  EXPECT_EQ(Draw(*again, 64).keys, first.keys);
  EXPECT_NE(Draw(*again, 64).keys, first.keys);  // a later call draws afresh
}

TEST(ReplaySamplersTest, FifoLifoAndHeapsDrawTheirItemEveryTime) {
  const std::vector<double> priorities = {2.0, 7.0, 0.5, 3.0};
  const struct {
    SelectorKind kind;
    uint64_t key;
  } cases[] = {{SelectorKind::kFifo, 0}, {SelectorKind::kLifo, 3}, {SelectorKind::kMaxHeap, 1},
               {SelectorKind::kMinHeap, 2}};
  for (const auto& c : cases) {
    auto replay = MakeTable(c.kind);
    AddWith(*replay, priorities);
    const SampleResult result = Draw(*replay, 5);
    EXPECT_EQ(result.keys, std::vector<uint64_t>(5, c.key)) << table::SelectorKindName(c.kind);
    EXPECT_EQ(result.probabilities, std::vector<double>(5, 1.0));
    EXPECT_EQ(result.weights, std::vector<double>(5, 1.0));
    EXPECT_EQ(replay->size(), 4);  // without max_times_sampled nothing leaves
  }
}

TEST(ReplaySamplersTest, UpdatesAreRefusedByUniformFifoLifoAndMoveTheHeaps) {
  for (const SelectorKind kind : {SelectorKind::kUniform, SelectorKind::kFifo, SelectorKind::kLifo}) {
    auto replay = MakeTable(kind);
    AddWith(*replay, {1.0, 2.0});
    UpdateCounts counts;
    const Status status = replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{9.0}, &counts);
    EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
    EXPECT_NE(status.message().find(std::string(table::SelectorKindName(kind))), std::string::npos)
        << status.ToString();
    EXPECT_EQ(replay->counters().priorities_updated, 0);
  }
  auto max_heap = MakeTable(SelectorKind::kMaxHeap);
  auto min_heap = MakeTable(SelectorKind::kMinHeap);
  for (Replay* replay : {max_heap.get(), min_heap.get()}) {
    AddWith(*replay, {1.0, 2.0, 3.0});
    UpdateCounts counts;
    ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0, 2}, std::vector<double>{9.0, 0.1}, &counts).ok());
    EXPECT_EQ(counts.applied, 2);
  }
  EXPECT_EQ(Draw(*max_heap, 1).keys, std::vector<uint64_t>{0});
  EXPECT_EQ(Draw(*min_heap, 1).keys, std::vector<uint64_t>{2});
}

TEST(ReplaySamplersTest, ShardDrawsAtFractionsNeedAPrioritizedTable) {
  SampleResult result;
  auto uniform = MakeTable(SelectorKind::kUniform);
  AddWith(*uniform, {1.0});
  EXPECT_EQ(uniform->SampleAt(std::vector<double>{0.5}, &result).code(), Status::Code::kFailedPrecondition);
  auto counted = MakeTable(SelectorKind::kPrioritized, 8, 2);
  AddWith(*counted, {1.0});
  EXPECT_EQ(counted->SampleAt(std::vector<double>{0.5}, &result).code(), Status::Code::kFailedPrecondition);
}

// A fifo table with max_times_sampled 1 is a queue: a batch is the oldest
// items, each once, and then they are gone.
TEST(ReplaySamplersTest, FifoWithMaxTimesSampledOneIsAQueue) {
  auto replay = MakeTable(SelectorKind::kFifo, 8, 1);
  AddWith(*replay, {1, 1, 1, 1, 1});
  const SampleResult first = Draw(*replay, 3);
  EXPECT_EQ(first.keys, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(first.weights, std::vector<double>(3, 1.0));
  EXPECT_EQ(replay->size(), 2);
  EXPECT_EQ(replay->SlotOf(0), -1);
  // Fewer draws left than the batch: refused, and nothing changes.
  SampleResult refused;
  const Status status = replay->Sample(3, 0.4, &refused);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition) << status.ToString();
  EXPECT_EQ(replay->size(), 2);
  EXPECT_EQ(Draw(*replay, 2).keys, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(replay->size(), 0);
  EXPECT_EQ(replay->Sample(1, 0.4, &refused).code(), Status::Code::kFailedPrecondition);
  // The freed slots take new items, which queue behind nothing.
  AddWith(*replay, {1, 1});
  EXPECT_EQ(Draw(*replay, 2).keys, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(replay->counters().items_sampled, 7);
}

TEST(ReplaySamplersTest, EveryItemIsDrawnMaxTimesSampledTimesThenLeaves) {
  for (const SelectorKind kind : {SelectorKind::kUniform, SelectorKind::kPrioritized, SelectorKind::kLifo}) {
    auto replay = MakeTable(kind, 16, 3);
    AddWith(*replay, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    std::map<uint64_t, int> drawn;
    for (int call = 0; call < 6; ++call) {
      const SampleResult result = Draw(*replay, 5);
      for (size_t i = 0; i < result.keys.size(); ++i) {
        ++drawn[result.keys[i]];
        EXPECT_LE(result.weights[i], 1.0);
        EXPECT_GT(result.probabilities[i], 0.0);
      }
    }
    EXPECT_EQ(replay->size(), 0) << table::SelectorKindName(kind);
    ASSERT_EQ(drawn.size(), 10u);
    for (const auto& [key, times] : drawn) EXPECT_EQ(times, 3) << "key " << key;
  }
}

// Prioritized with max_times_sampled 1: a batch of every item held is every
// item once, stratified and shuffled, weighted as the default is.
TEST(ReplaySamplersTest, PrioritizedDrawsOnceEachWithMaxTimesSampledOne) {
  auto replay = MakeTable(SelectorKind::kPrioritized, 8, 1);
  AddWith(*replay, {1.0, 4.0, 9.0, 16.0});
  const SampleResult result = Draw(*replay, 4, 1.0);
  std::vector<uint64_t> keys = result.keys;
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<uint64_t>{0, 1, 2, 3}));
  // Key 0 holds the smallest leaf when the batch starts: weight exactly 1.
  for (size_t i = 0; i < 4; ++i) {
    if (result.keys[i] == 0) {
      EXPECT_EQ(result.weights[i], 1.0);
    } else {
      EXPECT_LT(result.weights[i], 1.0);
    }
  }
  EXPECT_EQ(replay->size(), 0);
}

}  // namespace
}  // namespace perserve::replay
