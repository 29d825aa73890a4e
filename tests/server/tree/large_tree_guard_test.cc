// The descent's empty-subtree guard at the default capacity, 2^21 leaves
// (issue 19): the oracle's random 2^21 sequences set leaves all over the tree
// and did not notice the guard missing; only the small capacities did. Here
// the tree is as a replay leaves it while it fills: leaves 0 .. filled - 1
// set, every later one never set, so a mass at or near the total walks along
// the edge of the empty tail, where the plain rule steps into it. Every
// strategy on every backend, against the reference, bit for bit.
#include <cmath>
#include <limits>
#include <tuple>

#include "server/tree/tree_test_util.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree::testing {
namespace {

constexpr int64_t kCapacity = int64_t{1} << 21;

// A replay leaf p^alpha: > 0, over a wide range of magnitudes, now and then subnormal.
double NonZeroValue(std::mt19937_64& rng) {
  double value = 0.0;
  while (!(value > 0.0)) value = RandomValue(rng);
  return value;
}

// Masses along the end of the filled leaves: the total and beyond, the last
// strata of stratified draws (u = 1 gives B * T / B, which may round past T),
// the boundaries before the last few filled leaves, and uniform draws.
std::vector<double> TailMasses(const ReferenceTree& reference, int64_t filled, std::mt19937_64& rng) {
  const double total = reference.Total();
  const double largest = std::numeric_limits<double>::max();
  std::vector<double> masses = {total, std::nextafter(total, largest), std::nextafter(total, 0.0), 2.0 * total,
                                1e300};
  for (int64_t batch : {32, 512, 1024, 4096}) {
    for (double unit : {1.0, std::nextafter(1.0, 0.0), 0.999999, 0.5}) {
      masses.push_back(StratifiedMass(batch - 1, unit, total, batch));
    }
  }
  for (int64_t leaf = std::max<int64_t>(0, filled - 8); leaf < filled; ++leaf) {
    double before = 0.0;  // the sum of the leaves before `leaf`, added along its root path
    for (int64_t node = kCapacity + leaf; node > 1; node /= 2) {
      if (node % 2 == 1) before += reference.sums()[node - 1];
    }
    for (double boundary : {before, std::nextafter(before, 0.0), std::nextafter(before, largest)}) {
      masses.push_back(boundary);
    }
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 256; ++i) masses.push_back(unit(rng) * total);
  return masses;
}

using GuardParam = std::tuple<Device, UpdateStrategy>;
class LargeTreeGuardTest : public ::testing::TestWithParam<GuardParam> {};

TEST_P(LargeTreeGuardTest, AFillingTreeNeverDescendsIntoItsEmptyTail) {
  const auto [device, strategy] = GetParam();
  PERSERVE_SKIP_IF_UNUSABLE(device);
  std::unique_ptr<PriorityTree> tree = MakeTree(kCapacity, strategy, device);
  ASSERT_NE(tree, nullptr);
  ReferenceTree reference(kCapacity);
  std::mt19937_64 rng(2021);
  int64_t filled = 0;
  // 1000 leaves: the empty tail holds all but the first few subtrees at every
  // level. 2^17 + 777: the tail starts inside a subtree whose left half is
  // full, so masses reach it after subtractions that round.
  for (int64_t fill_to : {int64_t{1000}, (int64_t{1} << 17) + 777}) {
    while (filled < fill_to) {
      const int64_t k = std::min<int64_t>(filled < 1000 ? 512 : 65536, fill_to - filled);
      Batch batch;
      for (int64_t j = 0; j < k; ++j) {
        batch.indices.push_back(filled + j);
        batch.values.push_back(NonZeroValue(rng));
      }
      const Status status = tree->Update(batch.indices, batch.values);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ApplyToReference(batch, &reference);
      filled += k;
    }
    ASSERT_TRUE(NodesMatch(*tree, reference)) << "filled " << filled;

    const std::vector<double> masses = TailMasses(reference, filled, rng);
    std::vector<int64_t> found(masses.size());
    const Status status = tree->FindPrefixSum(masses, found);
    ASSERT_TRUE(status.ok()) << status.ToString();
    std::vector<TreeNode> nodes(reference.sums().size());
    for (size_t i = 0; i < nodes.size(); ++i) nodes[i] = TreeNode{reference.sums()[i], reference.mins()[i]};
    int plain_into_tail = 0;
    for (size_t j = 0; j < masses.size(); ++j) {
      const int64_t expected = reference.GuardedDescend(masses[j]);
      ASSERT_LT(found[j], filled) << "mass " << masses[j] << " (total " << reference.Total() << ") landed in the tail";
      ASSERT_EQ(found[j], expected) << "mass " << masses[j] << " (total " << reference.Total() << ")";
      ASSERT_EQ(FindPrefixSumLeaf(nodes.data(), kCapacity, masses[j]), expected) << "mass " << masses[j];
      if (reference.Leaf(reference.PlainDescend(masses[j])) == 0.0) ++plain_into_tail;
    }
    EXPECT_GT(plain_into_tail, 0) << "filled " << filled << ": no mass needed the guard, so this checked nothing";

    // The tree's own stratified draws stay in the filled leaves too.
    std::vector<int64_t> drawn(4096);
    std::vector<double> values(drawn.size());
    ASSERT_TRUE(tree->Sample(7, static_cast<uint64_t>(filled), drawn, values).ok());
    for (size_t i = 0; i < drawn.size(); ++i) {
      ASSERT_LT(drawn[i], filled) << "draw " << i;
      ASSERT_GT(values[i], 0.0) << "draw " << i;
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<GuardParam>& info) {
  return std::string(std::get<0>(info.param) == Device::kCuda ? "Cuda_" : "Cpu_") +
         std::string(UpdateStrategyName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Capacity2To21, LargeTreeGuardTest,
                         ::testing::Combine(::testing::ValuesIn(kBothDevices),
                                            ::testing::Values(UpdateStrategy::kPerElement, UpdateStrategy::kRebuild,
                                                              UpdateStrategy::kSparse, UpdateStrategy::kAuto)),
                         ParamName);

}  // namespace
}  // namespace perserve::tree::testing
