// Proportional sampling, through the descent with host masses and through the
// tree's own Sample(), on every device, checked against the exact
// probabilities with a chi-square test (fixed seeds, so the verdict is stable),
// and Sample()'s strata, reproducibility and independence of its draws.
#include <cmath>
#include <set>

#include "server/tree/tree_test_util.h"

namespace perserve::tree::testing {
namespace {

// Upper critical value of chi-square with `dof` degrees of freedom at
// significance 0.001 (z = 3.0902), by the Wilson-Hilferty approximation.
double ChiSquareCritical001(int dof) {
  const double z = 3.0902;
  const double a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct SamplingResult {
  std::vector<int64_t> counts;
  double chi_square = 0.0;
  int dof = 0;
};

// The chi-square statistic of `counts` (over `draws` draws) against the
// probabilities leaves[i] / sum; empty leaves are left out of it.
SamplingResult ChiSquare(const std::vector<double>& leaves, std::vector<int64_t> counts, double draws) {
  double total = 0.0;
  for (double leaf : leaves) total += leaf;
  SamplingResult result;
  result.counts = std::move(counts);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i] == 0.0) continue;
    const double expected = draws * leaves[i] / total;
    result.chi_square += (result.counts[i] - expected) * (result.counts[i] - expected) / expected;
    ++result.dof;
  }
  --result.dof;
  return result;
}

std::unique_ptr<PriorityTree> TreeWithLeaves(const std::vector<double>& leaves, Device device) {
  std::unique_ptr<PriorityTree> tree = MakeTree(static_cast<int64_t>(leaves.size()), UpdateStrategy::kAuto, device);
  std::vector<int64_t> indices(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) indices[i] = static_cast<int64_t>(i);
  EXPECT_TRUE(tree->Update(indices, leaves).ok());
  return tree;
}

// Draws `rounds` batches of `batch` host masses from a tree with these leaves,
// stratified ((i + u) * T / B, as PER draws them) or plain uniform, and tallies the leaves.
SamplingResult Sample(const std::vector<double>& leaves, bool stratified, int rounds, int batch, uint64_t seed,
                      Device device = Device::kCpu) {
  std::unique_ptr<PriorityTree> tree = TreeWithLeaves(leaves, device);
  const double total = tree->Total();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<int64_t> counts(leaves.size(), 0);
  std::vector<double> masses(batch);
  std::vector<int64_t> found(batch);
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < batch; ++i) masses[i] = stratified ? (i + unit(rng)) * total / batch : unit(rng) * total;
    EXPECT_TRUE(tree->FindPrefixSum(masses, found).ok());
    for (int64_t leaf : found) ++counts[leaf];
  }
  return ChiSquare(leaves, std::move(counts), static_cast<double>(rounds) * batch);
}

const std::vector<double> kLeaves = {1.0, 0.0, 2.0, 0.5, 8.0, 0.0, 0.25, 3.0,
                                     1e-3, 4.0, 0.0, 0.75, 1.5, 6.0, 0.1, 2.5};

class SamplingTest : public DeviceTest {};

TEST_P(SamplingTest, StratifiedDrawsFollowTheExactProbabilities) {
  const SamplingResult result = Sample(kLeaves, /*stratified=*/true, 400, 64, 11, GetParam());
  EXPECT_LT(result.chi_square, ChiSquareCritical001(result.dof)) << "dof " << result.dof;
  for (size_t i = 0; i < kLeaves.size(); ++i) {
    if (kLeaves[i] == 0.0) {
      EXPECT_EQ(result.counts[i], 0) << "empty leaf " << i << " was drawn";
    }
  }
}

TEST_P(SamplingTest, UniformMassesFollowTheExactProbabilities) {
  const SamplingResult result = Sample(kLeaves, /*stratified=*/false, 400, 64, 12, GetParam());
  EXPECT_LT(result.chi_square, ChiSquareCritical001(result.dof)) << "dof " << result.dof;
}

// The test has teeth: the same draws judged against a slightly wrong
// distribution (one leaf's weight moved to its neighbour) are rejected.
TEST(SamplingStatisticTest, ChiSquareRejectsAShiftedDistribution) {
  std::vector<double> shifted = kLeaves;
  shifted[4] -= 0.5;
  shifted[7] += 0.5;
  const SamplingResult actual = Sample(kLeaves, /*stratified=*/true, 400, 64, 11);
  const double draws = 400.0 * 64.0;
  double total = 0.0;
  for (double v : shifted) total += v;
  double chi_square = 0.0;
  for (size_t i = 0; i < shifted.size(); ++i) {
    if (shifted[i] == 0.0) continue;
    const double expected = draws * shifted[i] / total;
    chi_square += (actual.counts[i] - expected) * (actual.counts[i] - expected) / expected;
  }
  EXPECT_GT(chi_square, ChiSquareCritical001(actual.dof));
}

// ---- The tree's own sampler: Sample(seed, counter, ...)

TEST_P(SamplingTest, TreeSampleFollowsTheExactProbabilitiesAndReturnsLeafValues) {
  std::unique_ptr<PriorityTree> tree = TreeWithLeaves(kLeaves, GetParam());
  std::vector<int64_t> counts(kLeaves.size(), 0);
  std::vector<int64_t> indices(64);
  std::vector<double> values(64);
  for (uint64_t round = 0; round < 400; ++round) {
    ASSERT_TRUE(tree->Sample(21, round, indices, values).ok());
    for (size_t i = 0; i < indices.size(); ++i) {
      ASSERT_GE(indices[i], 0);
      ASSERT_LT(indices[i], static_cast<int64_t>(kLeaves.size()));
      ASSERT_EQ(values[i], kLeaves[indices[i]]) << "the value returned with leaf " << indices[i];
      ++counts[indices[i]];
    }
  }
  const SamplingResult result = ChiSquare(kLeaves, counts, 400.0 * 64.0);
  EXPECT_LT(result.chi_square, ChiSquareCritical001(result.dof)) << "dof " << result.dof;
  for (size_t i = 0; i < kLeaves.size(); ++i) {
    if (kLeaves[i] == 0.0) {
      EXPECT_EQ(result.counts[i], 0) << "empty leaf " << i << " was drawn";
    }
  }
}

// Draw i lands in stratum i: the leaf's span [before, before + value) of the
// prefix sums meets ((i) T / B, (i + 1) T / B] (up to rounding, 1e-9 T).
TEST_P(SamplingTest, TreeSampleDrawsEachFromItsOwnStratum) {
  const int64_t capacity = int64_t{1} << 12;
  std::unique_ptr<PriorityTree> tree = MakeTree(capacity, UpdateStrategy::kAuto, GetParam());
  std::mt19937_64 rng(8);
  const Batch batch = RandomBatch(rng, capacity, BatchShape::kAllLeaves);
  ASSERT_TRUE(tree->Update(batch.indices, batch.values).ok());
  std::vector<double> leaf(static_cast<size_t>(capacity)), before(static_cast<size_t>(capacity) + 1, 0.0);
  for (size_t j = 0; j < batch.indices.size(); ++j) leaf[batch.indices[j]] = batch.values[j];
  for (int64_t i = 0; i < capacity; ++i) before[i + 1] = before[i] + leaf[i];
  const double total = tree->Total();
  const double slack = 1e-9 * total;
  for (int64_t draws : {int64_t{512}, int64_t{1000}}) {
    std::vector<int64_t> indices(static_cast<size_t>(draws));
    std::vector<double> values(static_cast<size_t>(draws));
    ASSERT_TRUE(tree->Sample(3, static_cast<uint64_t>(draws), indices, values).ok());
    for (int64_t i = 0; i < draws; ++i) {
      const int64_t at = indices[i];
      ASSERT_GT(leaf[at], 0.0) << "draw " << i << " returned empty leaf " << at;
      ASSERT_EQ(values[i], leaf[at]);
      ASSERT_LE(before[at], (i + 1) * total / draws + slack) << "draw " << i << " of " << draws << ": leaf " << at;
      ASSERT_GE(before[at + 1], i * total / draws - slack) << "draw " << i << " of " << draws << ": leaf " << at;
    }
  }
}

// Equal leaves, 64 to a stratum: where a draw lands inside its stratum is its
// uniform u_i, so the offsets must spread over the stratum (a generator that
// handed every draw of a call the same u would put them all at one offset).
TEST_P(SamplingTest, TreeSampleDrawsWithinACallAreIndependent) {
  const int64_t capacity = int64_t{1} << 14;
  const int64_t draws = 256;
  const int64_t per_stratum = capacity / draws;
  std::unique_ptr<PriorityTree> tree = MakeTree(capacity, UpdateStrategy::kAuto, GetParam());
  std::vector<int64_t> all(static_cast<size_t>(capacity));
  for (int64_t i = 0; i < capacity; ++i) all[i] = i;
  ASSERT_TRUE(tree->Update(all, std::vector<double>(all.size(), 1.0)).ok());
  std::vector<int64_t> indices(static_cast<size_t>(draws));
  std::vector<double> values(static_cast<size_t>(draws));
  ASSERT_TRUE(tree->Sample(17, 0, indices, values).ok());
  std::set<int64_t> offsets;
  double mean = 0.0;
  for (int64_t i = 0; i < draws; ++i) {
    const int64_t offset = indices[i] - i * per_stratum;
    ASSERT_GE(offset, 0) << "draw " << i;
    ASSERT_LT(offset, per_stratum) << "draw " << i;
    offsets.insert(offset);
    mean += static_cast<double>(offset) / draws;
  }
  // 256 uniform draws over 64 offsets: ~63 distinct expected, mean 31.5 +- 1.2.
  EXPECT_GT(offsets.size(), 48u);
  EXPECT_NEAR(mean, (per_stratum - 1) / 2.0, 6.0);
}

TEST_P(SamplingTest, TreeSampleRepeatsForTheSameSeedAndCounterAndDrawsAfreshOtherwise) {
  std::unique_ptr<PriorityTree> tree = MakeTree(int64_t{1} << 12, UpdateStrategy::kAuto, GetParam());
  std::mt19937_64 rng(4);
  const Batch batch = RandomBatch(rng, int64_t{1} << 12, BatchShape::kAllLeaves);
  ASSERT_TRUE(tree->Update(batch.indices, batch.values).ok());
  auto draw = [&](uint64_t seed, uint64_t counter) {
    std::vector<int64_t> indices(512);
    std::vector<double> values(512);
    EXPECT_TRUE(tree->Sample(seed, counter, indices, values).ok());
    return indices;
  };
  const std::vector<int64_t> first = draw(1, 10);
  EXPECT_EQ(draw(1, 10), first);
  EXPECT_NE(draw(1, 11), first);
  EXPECT_NE(draw(2, 10), first);
}

TEST_P(SamplingTest, TreeSampleRejectsMismatchedSizesAndAnEmptyTree) {
  std::unique_ptr<PriorityTree> tree = MakeTree(16, UpdateStrategy::kAuto, GetParam());
  std::vector<int64_t> indices(4);
  std::vector<double> values(4), three(3);
  EXPECT_TRUE(tree->Sample(1, 0, {}, {}).ok()) << "an empty batch is fine on an empty tree";
  const Status empty = tree->Sample(1, 0, indices, values);
  EXPECT_EQ(empty.code(), Status::Code::kFailedPrecondition) << empty.ToString();
  ASSERT_TRUE(tree->Update(std::vector<int64_t>{3}, std::vector<double>{1.0}).ok());
  EXPECT_EQ(tree->Sample(1, 0, indices, three).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(tree->Sample(1, 0, indices, values).ok());
  EXPECT_EQ(indices, (std::vector<int64_t>{3, 3, 3, 3}));
}

INSTANTIATE_TEST_SUITE_P(Devices, SamplingTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);

}  // namespace
}  // namespace perserve::tree::testing
