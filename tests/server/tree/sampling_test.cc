// Proportional sampling through the descent, checked against the exact
// probabilities with a chi-square test (fixed seeds, so the verdict is stable).
#include <cmath>

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

// Draws `rounds` batches of `batch` masses from a 16-leaf tree, stratified
// ((i + u) * T / B, as PER draws them) or plain uniform, and tallies the leaves.
SamplingResult Sample(const std::vector<double>& leaves, bool stratified, int rounds, int batch, uint64_t seed) {
  std::unique_ptr<PriorityTree> tree = MakeTree(static_cast<int64_t>(leaves.size()), UpdateStrategy::kAuto);
  std::vector<int64_t> indices(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) indices[i] = static_cast<int64_t>(i);
  EXPECT_TRUE(tree->Update(indices, leaves).ok());
  const double total = tree->Total();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  SamplingResult result;
  result.counts.assign(leaves.size(), 0);
  std::vector<double> masses(batch);
  std::vector<int64_t> found(batch);
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < batch; ++i) masses[i] = stratified ? (i + unit(rng)) * total / batch : unit(rng) * total;
    EXPECT_TRUE(tree->FindPrefixSum(masses, found).ok());
    for (int64_t leaf : found) ++result.counts[leaf];
  }
  const double draws = static_cast<double>(rounds) * batch;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i] == 0.0) continue;
    const double expected = draws * leaves[i] / total;
    result.chi_square += (result.counts[i] - expected) * (result.counts[i] - expected) / expected;
    ++result.dof;
  }
  --result.dof;
  return result;
}

const std::vector<double> kLeaves = {1.0, 0.0, 2.0, 0.5, 8.0, 0.0, 0.25, 3.0,
                                     1e-3, 4.0, 0.0, 0.75, 1.5, 6.0, 0.1, 2.5};

TEST(SamplingTest, StratifiedDrawsFollowTheExactProbabilities) {
  const SamplingResult result = Sample(kLeaves, /*stratified=*/true, 400, 64, 11);
  EXPECT_LT(result.chi_square, ChiSquareCritical001(result.dof)) << "dof " << result.dof;
  for (size_t i = 0; i < kLeaves.size(); ++i) {
    if (kLeaves[i] == 0.0) {
      EXPECT_EQ(result.counts[i], 0) << "empty leaf " << i << " was drawn";
    }
  }
}

TEST(SamplingTest, UniformMassesFollowTheExactProbabilities) {
  const SamplingResult result = Sample(kLeaves, /*stratified=*/false, 400, 64, 12);
  EXPECT_LT(result.chi_square, ChiSquareCritical001(result.dof)) << "dof " << result.dof;
}

// The test has teeth: the same draws judged against a slightly wrong
// distribution (one leaf's weight moved to its neighbour) are rejected.
TEST(SamplingTest, ChiSquareRejectsAShiftedDistribution) {
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

}  // namespace
}  // namespace perserve::tree::testing
