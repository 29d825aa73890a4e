// Every backend and update strategy against the reference tree, bit for bit:
// every node of the sum and min trees after every batch, and the descents for
// random, stratified and edge masses. The CPU and CUDA suites run the same
// sequences (same seeds), so matching the reference means matching each other.
#include <tuple>

#include "server/tree/tree_test_util.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree::testing {
namespace {

void ExpectDescentsMatch(const PriorityTree& tree, const ReferenceTree& reference, std::mt19937_64& rng) {
  if (!(reference.Total() > 0.0)) return;
  const std::vector<double> masses = DescentMasses(reference, rng);
  std::vector<int64_t> found(masses.size());
  const Status status = tree.FindPrefixSum(masses, found);
  ASSERT_TRUE(status.ok()) << status.ToString();
  // The single-descent spelling of the rule (tree_algorithm.h) on the same nodes.
  std::vector<TreeNode> nodes(reference.sums().size());
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i] = TreeNode{reference.sums()[i], reference.mins()[i]};
  for (size_t j = 0; j < masses.size(); ++j) {
    const int64_t expected = reference.GuardedDescend(masses[j]);
    ASSERT_EQ(found[j], expected) << "mass " << masses[j] << " (total " << reference.Total() << ")";
    ASSERT_EQ(FindPrefixSumLeaf(nodes.data(), reference.capacity(), masses[j]), expected) << "mass " << masses[j];
    ASSERT_GT(reference.Leaf(found[j]), 0.0) << "descent returned an empty leaf for mass " << masses[j];
    const int64_t plain = reference.PlainDescend(masses[j]);
    if (reference.Leaf(plain) > 0.0) {
      ASSERT_EQ(found[j], plain) << "mass " << masses[j];
    }
  }
}

using OracleParam = std::tuple<Device, int64_t, UpdateStrategy>;
class PriorityTreeOracleTest : public ::testing::TestWithParam<OracleParam> {};

TEST_P(PriorityTreeOracleTest, RandomOperationSequencesMatchReferenceBitForBit) {
  const auto [device, capacity, strategy] = GetParam();
  PERSERVE_SKIP_IF_UNUSABLE(device);
  std::unique_ptr<PriorityTree> tree = MakeTree(capacity, strategy, device);
  ASSERT_NE(tree, nullptr);
  ReferenceTree reference(capacity);
  std::mt19937_64 rng(1234 + static_cast<uint64_t>(capacity));
  const BatchShape shapes[] = {BatchShape::kAllLeaves,  BatchShape::kRandom,  BatchShape::kDuplicates,
                               BatchShape::kSiblings,   BatchShape::kZeroRun, BatchShape::kRandom,
                               BatchShape::kDuplicates, BatchShape::kRandom,  BatchShape::kSiblings};
  const int rounds = capacity >= (int64_t{1} << 20) ? 1 : 4;
  for (int round = 0; round < rounds; ++round) {
    for (BatchShape shape : shapes) {
      const Batch batch = RandomBatch(rng, capacity, shape);
      const Status status = tree->Update(batch.indices, batch.values);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ApplyToReference(batch, &reference);
      ASSERT_TRUE(NodesMatch(*tree, reference)) << "after a batch of " << batch.indices.size() << " (shape "
                                                << static_cast<int>(shape) << ", round " << round << ")";
      ASSERT_EQ(tree->Total(), reference.Total());
      ASSERT_EQ(tree->Min(), reference.Min());
      ExpectDescentsMatch(*tree, reference, rng);
      if (HasFatalFailure()) return;
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<OracleParam>& info) {
  const int log2_capacity = std::countr_zero(static_cast<uint64_t>(std::get<1>(info.param)));
  return "capacity_2_" + std::to_string(log2_capacity) + "_" +
         std::string(UpdateStrategyName(std::get<2>(info.param)));
}

// The largest is the server's default capacity; under AddressSanitizer 2^16,
// which still takes the paths only large trees take (rebuild levels past
// update_strategies.cc's parallel grain, 2^14 nodes) in a tenth of the time
// (2^21's four cases took 20-33 s each there).
#ifdef __SANITIZE_ADDRESS__
constexpr int64_t kLargeCapacity = int64_t{1} << 16;
#else
constexpr int64_t kLargeCapacity = int64_t{1} << 21;
#endif
const auto kCapacities = ::testing::Values(int64_t{1} << 4, int64_t{1} << 12, kLargeCapacity);
const auto kStrategies = ::testing::Values(UpdateStrategy::kPerElement, UpdateStrategy::kRebuild,
                                           UpdateStrategy::kSparse, UpdateStrategy::kAuto);
INSTANTIATE_TEST_SUITE_P(Cpu, PriorityTreeOracleTest,
                         ::testing::Combine(::testing::Values(Device::kCpu), kCapacities, kStrategies), ParamName);
// per_element runs as sparse on CUDA; kept so the suites stay the same shape.
INSTANTIATE_TEST_SUITE_P(Cuda, PriorityTreeOracleTest,
                         ::testing::Combine(::testing::Values(Device::kCuda), kCapacities, kStrategies), ParamName);

// The level race of the original GPU rebuild: a parent summed before its
// children were written. Changing every leaf at once means every internal node
// depends on fresh children, so any rebuild that runs levels out of order (or
// together) leaves stale sums that this comparison catches. 2^15 leaves take
// the CUDA rebuild through its per-level launches as well as its one-block top.
class PriorityTreeRebuildTest : public DeviceTest {};

TEST_P(PriorityTreeRebuildTest, EveryLevelSeesItsChildrensNewValues) {
  for (int64_t capacity : {int64_t{1} << 4, int64_t{1} << 15}) {
    std::unique_ptr<PriorityTree> tree = Make(capacity, UpdateStrategy::kRebuild);
    ReferenceTree reference(capacity);
    std::mt19937_64 rng(7);
    for (int round = 0; round < 3; ++round) {
      const Batch batch = RandomBatch(rng, capacity, BatchShape::kAllLeaves);
      ASSERT_TRUE(tree->Update(batch.indices, batch.values).ok());
      ApplyToReference(batch, &reference);
      ASSERT_TRUE(NodesMatch(*tree, reference)) << "capacity " << capacity << ", round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PriorityTreeRebuildTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);

class PriorityTreeStrategyTest : public DeviceTest {};

TEST_P(PriorityTreeStrategyTest, RepeatedIndicesLastValueWinsOnEveryStrategy) {
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild, UpdateStrategy::kSparse,
                                  UpdateStrategy::kAuto}) {
    std::unique_ptr<PriorityTree> tree = Make(64, strategy);
    const std::vector<int64_t> indices = {5, 9, 5, 5, 9, 63};
    const std::vector<double> values = {1.0, 2.0, 3.0, 4.0, 0.5, 8.0};
    ASSERT_TRUE(tree->Update(indices, values).ok());
    std::vector<double> got(3);
    const std::vector<int64_t> probe = {5, 9, 63};
    ASSERT_TRUE(tree->Get(probe, got).ok());
    EXPECT_EQ(got, (std::vector<double>{4.0, 0.5, 8.0})) << UpdateStrategyName(strategy);
    EXPECT_EQ(tree->Total(), 4.0 + 0.5 + 8.0) << UpdateStrategyName(strategy);
    EXPECT_EQ(tree->Min(), 0.5) << UpdateStrategyName(strategy);
  }
}

// Many threads writing one leaf must not race: the same batch, heavy with
// repeats, on fresh trees gives the reference's nodes (the last value wins)
// every time. 20000 elements take CUDA's device-wide sort, 2000 its one-block sort.
TEST_P(PriorityTreeStrategyTest, HeavilyRepeatedBatchesAreDeterministic) {
  const int64_t capacity = int64_t{1} << 12;
  std::mt19937_64 rng(99);
  for (int64_t k : {int64_t{2000}, int64_t{20000}}) {
    Batch batch;
    for (int64_t j = 0; j < k; ++j) {
      batch.indices.push_back(static_cast<int64_t>(rng() % 64) * 61 % capacity);  // 64 distinct leaves
      batch.values.push_back(RandomValue(rng));
    }
    ReferenceTree reference(capacity);
    ApplyToReference(batch, &reference);
    for (UpdateStrategy strategy : {UpdateStrategy::kSparse, UpdateStrategy::kRebuild}) {
      for (int repeat = 0; repeat < 3; ++repeat) {
        std::unique_ptr<PriorityTree> tree = Make(capacity, strategy);
        ASSERT_TRUE(tree->Update(batch.indices, batch.values).ok());
        ASSERT_TRUE(NodesMatch(*tree, reference))
            << "k " << k << ", " << UpdateStrategyName(strategy) << ", repeat " << repeat;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PriorityTreeStrategyTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);

}  // namespace
}  // namespace perserve::tree::testing
