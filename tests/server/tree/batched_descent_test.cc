// DescendBatch (the CPU tree's many-paths-at-once descent) against the
// reference's guarded descent, bit for bit: every path lands on the leaf the
// oracle's does, for batch sizes that fill no group, one group, a group and a
// remainder, several groups; masses in any order, at the edges, on the
// boundaries between leaves; trees with zero leaves, zero runs and empty
// tails, where only the guard keeps a path out of an empty subtree.
#include <algorithm>
#include <vector>

#include "server/tree/tree_test_util.h"
#include "tree/cpu/batched_descent.h"
#include "tree/cpu/cpu_priority_tree.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree::testing {
namespace {

const size_t kBatchSizes[] = {1, 7, kDescentLanes - 1, kDescentLanes, kDescentLanes + 1, 512, 1000, 1024,
                              2 * kDescentLanes + 3};

// `count` masses: stratified over the total, as Sample draws them (sorted),
// or taken at random from DescentMasses' edges and boundaries (any order).
std::vector<double> BatchOfMasses(const ReferenceTree& reference, size_t count, bool stratified,
                                  std::mt19937_64& rng) {
  std::vector<double> masses;
  if (stratified) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (size_t i = 0; i < count; ++i) {
      masses.push_back(StratifiedMass(static_cast<int64_t>(i), 1.0 - unit(rng), reference.Total(),
                                      static_cast<int64_t>(count)));
    }
    return masses;
  }
  const std::vector<double> pool = DescentMasses(reference, rng);
  for (size_t i = 0; i < count; ++i) masses.push_back(pool[rng() % pool.size()]);
  return masses;
}

// A tree as a replay leaves it: random leaves (some 0, some subnormal) over a
// prefix of the capacity, a run of zeros inside it, the rest never set.
ReferenceTree RandomTree(int64_t capacity, std::mt19937_64& rng) {
  ReferenceTree reference(capacity);
  const int64_t filled = std::max<int64_t>(1, capacity - static_cast<int64_t>(rng() % (capacity / 2 + 1)));
  for (int64_t leaf = 0; leaf < filled; ++leaf) reference.Set(leaf, RandomValue(rng));
  const int64_t zero_from = static_cast<int64_t>(rng() % static_cast<uint64_t>(filled));
  for (int64_t leaf = zero_from; leaf < std::min(filled, zero_from + capacity / 8); ++leaf) reference.Set(leaf, 0.0);
  if (!(reference.Total() > 0.0)) reference.Set(filled - 1, 1.0);
  return reference;
}

// Every found leaf is the oracle's and non-empty. Returns how many masses the
// plain rule (no guard) would have sent into an empty leaf.
int ExpectOracleLeaves(const ReferenceTree& reference, const std::vector<double>& masses,
                       const std::vector<int64_t>& found) {
  int guarded = 0;
  for (size_t j = 0; j < masses.size(); ++j) {
    EXPECT_EQ(found[j], reference.GuardedDescend(masses[j]))
        << "path " << j << " of " << masses.size() << ", mass " << masses[j] << " (total " << reference.Total()
        << ")";
    EXPECT_GT(reference.Leaf(found[j]), 0.0) << "an empty leaf for mass " << masses[j];
    if (reference.Leaf(reference.PlainDescend(masses[j])) == 0.0) ++guarded;
  }
  return guarded;
}

TEST(BatchedDescentTest, EveryPathLandsOnTheOraclesLeafAtEverySizeAndOrder) {
  std::mt19937_64 rng(28);
  int guarded = 0;
  for (int64_t capacity : {int64_t{1}, int64_t{2}, int64_t{16}, int64_t{1} << 10, int64_t{1} << 14}) {
    const ReferenceTree reference = RandomTree(capacity, rng);
    const std::vector<TreeNode> nodes = NodesOf(reference);
    for (size_t count : kBatchSizes) {
      for (bool stratified : {true, false}) {
        const std::vector<double> masses = BatchOfMasses(reference, count, stratified, rng);
        std::vector<int64_t> found(count, -1);
        DescendBatch(nodes.data(), capacity, masses, found);
        guarded += ExpectOracleLeaves(reference, masses, found);
        for (size_t j = 0; j < count; ++j) {
          ASSERT_EQ(found[j], FindPrefixSumLeaf(nodes.data(), capacity, masses[j])) << "mass " << masses[j];
        }
        if (HasFailure()) return;
      }
    }
  }
  EXPECT_GT(guarded, 0) << "no mass needed the guard: the empty-subtree case went untested";
}

// The tree's own FindPrefixSum, batch after batch on one tree (its lanes'
// state must not leak from one call or group into the next), and between
// batches updates that empty and refill leaves.
TEST(BatchedDescentTest, RepeatedBatchesThroughTheTreeMatchTheOracle) {
  std::mt19937_64 rng(29);
  constexpr int64_t kCapacity = int64_t{1} << 12;
  CpuPriorityTree tree(kCapacity);
  ReferenceTree reference(kCapacity);
  for (int round = 0; round < 4; ++round) {
    const Batch batch = RandomBatch(rng, kCapacity, round % 2 == 0 ? BatchShape::kAllLeaves : BatchShape::kZeroRun);
    ASSERT_TRUE(tree.Update(batch.indices, batch.values).ok());
    ApplyToReference(batch, &reference);
    if (!(reference.Total() > 0.0)) continue;
    for (size_t count : kBatchSizes) {
      const std::vector<double> masses = BatchOfMasses(reference, count, round % 2 == 0, rng);
      std::vector<int64_t> first(count, -1), again(count, -1);
      ASSERT_TRUE(tree.FindPrefixSum(masses, first).ok());
      ASSERT_TRUE(tree.FindPrefixSum(masses, again).ok());
      EXPECT_EQ(first, again);
      ExpectOracleLeaves(reference, masses, first);
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace perserve::tree::testing
