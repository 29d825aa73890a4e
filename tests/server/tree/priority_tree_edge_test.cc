// Bad input, empty batches, tiny trees and the descent's rounding guard.
#include <cmath>
#include <limits>

#include "server/tree/tree_test_util.h"
#include "tree/cpu/cpu_priority_tree.h"
#include "tree/tree_validation.h"

namespace perserve::tree::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Snapshot {
  std::vector<double> sums, mins;
  bool operator==(const Snapshot&) const = default;
};

Snapshot Take(const PriorityTree& tree) {
  Snapshot snapshot{std::vector<double>(2 * tree.capacity()), std::vector<double>(2 * tree.capacity())};
  EXPECT_TRUE(tree.ReadNodes(snapshot.sums, snapshot.mins).ok());
  return snapshot;
}

TEST(PriorityTreeCreateTest, RoundsCapacityUpToAPowerOfTwo) {
  for (auto [requested, rounded] : {std::pair<int64_t, int64_t>{1, 1}, {2, 2}, {3, 4}, {1000, 1024},
                                    {int64_t{1} << 21, int64_t{1} << 21}, {(int64_t{1} << 20) + 1, int64_t{1} << 21}}) {
    std::unique_ptr<PriorityTree> tree;
    ASSERT_TRUE(PriorityTree::Create(requested, Device::kCpu, &tree).ok());
    EXPECT_EQ(tree->capacity(), rounded) << "requested " << requested;
    EXPECT_EQ(tree->Total(), 0.0);
    EXPECT_EQ(tree->Min(), kInf);
  }
}

TEST(PriorityTreeCreateTest, RejectsBadCapacityAndUnknownNames) {
  std::unique_ptr<PriorityTree> tree;
  EXPECT_EQ(PriorityTree::Create(0, Device::kCpu, &tree).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(PriorityTree::Create(-5, Device::kCpu, &tree).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(PriorityTree::Create(PriorityTree::kMaxCapacity + 1, Device::kCpu, &tree).code(),
            Status::Code::kInvalidArgument);
  UpdateStrategy strategy;
  EXPECT_EQ(ParseUpdateStrategy("fastest", &strategy).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(ParseUpdateStrategy("sparse", &strategy).ok());
  EXPECT_EQ(strategy, UpdateStrategy::kSparse);
  Device device;
  EXPECT_EQ(ParseDevice("tpu", &device).code(), Status::Code::kInvalidArgument);
}

// "auto" takes the CUDA backend exactly where a device is usable; "cuda"
// without one fails with a message that says so.
TEST(PriorityTreeCreateTest, AutoPicksCudaWhereUsableAndCudaFailsClearlyElsewhere) {
  std::string why;
  const bool usable = UsableCudaDeviceCount(&why) > 0;
  std::unique_ptr<PriorityTree> tree;
  const Status cuda = PriorityTree::Create(16, Device::kCuda, &tree);
  if (usable) {
    ASSERT_TRUE(cuda.ok()) << cuda.ToString();
    EXPECT_EQ(tree->device_name(), "cuda");
  } else {
    EXPECT_EQ(cuda.code(), Status::Code::kUnavailable);
    EXPECT_NE(cuda.message().find("device \"cuda\" requested"), std::string::npos) << cuda.message();
    EXPECT_NE(cuda.message().find(why), std::string::npos) << cuda.message();
  }
  ASSERT_TRUE(PriorityTree::Create(16, Device::kAuto, &tree).ok());
  EXPECT_EQ(tree->device_name(), usable ? "cuda" : "cpu");
}

class PriorityTreeUpdateTest : public DeviceTest {};
class PriorityTreeCapacityOneTest : public DeviceTest {};
class PriorityTreeDescentTest : public DeviceTest {};

TEST_P(PriorityTreeUpdateTest, RejectsTheWholeBatchAndNamesTheFirstBadElement) {
  struct Case {
    std::vector<int64_t> indices;
    std::vector<double> values;
    Status::Code code;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {{1, -1}, {1.0, 1.0}, Status::Code::kOutOfRange, "index -1 at position 1"},
      {{1, 16}, {1.0, 1.0}, Status::Code::kOutOfRange, "index 16 at position 1"},
      {{1, 2, 3}, {1.0, kNaN, -1.0}, Status::Code::kInvalidArgument, "position 1 is NaN"},
      {{1, 2}, {-0.5, kNaN}, Status::Code::kInvalidArgument, "position 0 is negative"},
      {{3}, {kInf}, Status::Code::kInvalidArgument, "position 0 is infinite"},
      {{3}, {-kInf}, Status::Code::kInvalidArgument, "position 0 is infinite"},
      {{1, 2}, {1.0}, Status::Code::kInvalidArgument, "indices has 2 elements but values has 1"},
  };
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild, UpdateStrategy::kSparse,
                                  UpdateStrategy::kAuto}) {
    std::unique_ptr<PriorityTree> tree = Make(16, strategy);
    const std::vector<int64_t> seed_indices = {0, 1, 2, 3};
    const std::vector<double> seed_values = {1.0, 2.0, 3.0, 4.0};
    ASSERT_TRUE(tree->Update(seed_indices, seed_values).ok());
    const Snapshot before = Take(*tree);
    for (const Case& c : cases) {
      const Status status = tree->Update(c.indices, c.values);
      EXPECT_EQ(status.code(), c.code) << status.ToString();
      EXPECT_NE(status.message().find(c.mention), std::string::npos)
          << "message \"" << status.message() << "\" lacks \"" << c.mention << "\"";
      EXPECT_TRUE(Take(*tree) == before) << "a rejected batch changed the tree: " << status.ToString();
    }
  }
}

// Two priorities of 1e308 are each finite, but their sum is not: the batch
// (plain values, or priorities with an exponent) is refused whole, naming the
// limit, and the tree keeps serving. Replacing a large leaf by an equal one,
// which keeps the total, is still accepted (the exact path, not the bound).
TEST_P(PriorityTreeUpdateTest, RefusesABatchThatWouldPushTheTotalPastTheLimit) {
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kSparse, UpdateStrategy::kAuto}) {
    std::unique_ptr<PriorityTree> tree = Make(16, strategy);
    ASSERT_TRUE(tree->Update(std::vector<int64_t>{0}, std::vector<double>{1.0}).ok());
    const Snapshot before = Take(*tree);
    const std::vector<int64_t> two = {1, 2};
    const std::vector<double> huge = {1e308, 1e308};
    for (const Status& status : {tree->Update(two, huge), tree->UpdateWithExponent(two, huge, 1.0)}) {
      EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
      EXPECT_NE(status.message().find("past the largest total"), std::string::npos) << status.message();
      EXPECT_TRUE(Take(*tree) == before) << "a refused batch changed the tree";
    }
    EXPECT_TRUE(std::isfinite(tree->Total()));

    // Up to the limit is fine, and so is rewriting the same big leaf (the
    // fast bound would count it twice; the exact sum does not).
    const std::vector<int64_t> one = {3};
    const std::vector<double> big = {kMaxTreeTotal * 0.75};
    ASSERT_TRUE(tree->Update(one, big).ok());
    ASSERT_TRUE(tree->Update(one, big).ok());
    EXPECT_EQ(tree->Total(), 1.0 + kMaxTreeTotal * 0.75);
    // A second one would pass the limit; a repeated index counts once (last wins).
    EXPECT_FALSE(tree->Update(std::vector<int64_t>{4}, big).ok());
    ASSERT_TRUE(tree->Update(std::vector<int64_t>{4, 4, 3}, std::vector<double>{big[0], 1.0, 2.0}).ok());
    EXPECT_EQ(tree->Total(), 1.0 + 1.0 + 2.0);
    // Sampling over a total near the limit stays finite and lands on set leaves.
    ASSERT_TRUE(tree->Update(one, big).ok());
    std::vector<int64_t> leaves(512);
    std::vector<double> values(512);
    ASSERT_TRUE(tree->Sample(7, 0, leaves, values).ok());
    for (size_t i = 0; i < leaves.size(); ++i) EXPECT_GT(values[i], 0.0) << "draw " << i << " leaf " << leaves[i];
  }
}

TEST_P(PriorityTreeUpdateTest, EmptyBatchesAreNoOps) {
  std::unique_ptr<PriorityTree> tree = Make(16, UpdateStrategy::kAuto);
  const Snapshot before = Take(*tree);
  ASSERT_TRUE(tree->Update({}, {}).ok());
  EXPECT_TRUE(Take(*tree) == before);
  // An empty descent is fine even on an empty tree; a non-empty one is not.
  ASSERT_TRUE(tree->FindPrefixSum({}, {}).ok());
  const std::vector<double> mass = {0.0};
  std::vector<int64_t> index(1);
  EXPECT_EQ(tree->FindPrefixSum(mass, index).code(), Status::Code::kFailedPrecondition);
}

// A leaf set to 0 is an empty slot: not drawn, and not part of the min that
// importance weights divide by (a min of 0 made every weight 0: issue 25).
TEST_P(PriorityTreeUpdateTest, MinCoversThePositiveLeavesOnly) {
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild, UpdateStrategy::kSparse}) {
    std::unique_ptr<PriorityTree> tree = Make(8, strategy);
    const std::vector<int64_t> one = {6};
    ASSERT_TRUE(tree->Update(one, std::vector<double>{0.5}).ok());
    EXPECT_EQ(tree->Min(), 0.5);
    ASSERT_TRUE(tree->Update(one, std::vector<double>{0.0}).ok());
    EXPECT_EQ(tree->Min(), kInf) << UpdateStrategyName(strategy);
    EXPECT_EQ(tree->Total(), 0.0);
    ASSERT_TRUE(tree->Update(std::vector<int64_t>{1, 2, 6}, std::vector<double>{2.0, 0.0, 3.0}).ok());
    EXPECT_EQ(tree->Min(), 2.0) << UpdateStrategyName(strategy);
    ASSERT_TRUE(tree->Update(std::vector<int64_t>{1}, std::vector<double>{0.0}).ok());
    EXPECT_EQ(tree->Min(), 3.0) << UpdateStrategyName(strategy);
  }
}

TEST_P(PriorityTreeCapacityOneTest, TheRootIsTheOnlyLeaf) {
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild, UpdateStrategy::kSparse,
                                  UpdateStrategy::kAuto}) {
    std::unique_ptr<PriorityTree> tree = Make(1, strategy);
    ASSERT_EQ(tree->capacity(), 1);
    ASSERT_TRUE(tree->Update(std::vector<int64_t>{0}, std::vector<double>{2.5}).ok());
    EXPECT_EQ(tree->Total(), 2.5);
    EXPECT_EQ(tree->Min(), 2.5);
    const std::vector<double> masses = {0.0, 2.5, 100.0};
    std::vector<int64_t> found(3, -1);
    ASSERT_TRUE(tree->FindPrefixSum(masses, found).ok());
    EXPECT_EQ(found, (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(tree->Update(std::vector<int64_t>{1}, std::vector<double>{1.0}).code(), Status::Code::kOutOfRange);
  }
}

TEST_P(PriorityTreeDescentTest, RejectsBadMassesAndMismatchedSizes) {
  std::unique_ptr<PriorityTree> tree = Make(16, UpdateStrategy::kAuto);
  ASSERT_TRUE(tree->Update(std::vector<int64_t>{3}, std::vector<double>{1.0}).ok());
  std::vector<int64_t> out(2);
  for (double bad : {kNaN, -1.0, kInf}) {
    const std::vector<double> masses = {0.5, bad};
    const Status status = tree->FindPrefixSum(masses, out);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("position 1"), std::string::npos) << status.message();
  }
  const std::vector<double> three = {0.1, 0.2, 0.3};
  EXPECT_EQ(tree->FindPrefixSum(three, out).code(), Status::Code::kInvalidArgument);
  std::vector<double> values(1);
  EXPECT_EQ(tree->Get(std::vector<int64_t>{16}, values).code(), Status::Code::kOutOfRange);
  EXPECT_EQ(tree->Get(std::vector<int64_t>{1, 2}, values).code(), Status::Code::kInvalidArgument);
}

// A mass at or past the total makes the plain descent walk right into the
// empty leaves after the last non-empty one; the guard must return that last
// non-empty leaf instead, and nothing else may change.
TEST_P(PriorityTreeDescentTest, NeverReturnsAnEmptyLeafWhenTheTotalIsPositive) {
  std::unique_ptr<PriorityTree> tree = Make(8, UpdateStrategy::kAuto);
  ReferenceTree reference(8);
  const std::vector<int64_t> indices = {0, 1, 2};
  const std::vector<double> values = {0.1, 0.2, 0.3};
  ASSERT_TRUE(tree->Update(indices, values).ok());
  for (size_t j = 0; j < indices.size(); ++j) reference.Set(indices[j], values[j]);
  const double total = tree->Total();
  const std::vector<double> masses = {0.0, 0.1, 0.3, total, std::nextafter(total, 1.0), 5.0, 1e300};
  std::vector<int64_t> found(masses.size());
  ASSERT_TRUE(tree->FindPrefixSum(masses, found).ok());
  EXPECT_EQ(found, (std::vector<int64_t>{0, 1, 1, 2, 2, 2, 2}));  // 0.3 < 0.1 + 0.2 in doubles
  EXPECT_EQ(reference.PlainDescend(total), 7) << "the plain rule should have fallen off the end here";
  // Zero leaves inside the tree are skipped too.
  ASSERT_TRUE(tree->Update(std::vector<int64_t>{1, 6}, std::vector<double>{0.0, 1.0}).ok());
  const std::vector<double> more = {0.1, 0.35, 1.4, 1.5, 9.0};
  std::vector<int64_t> found_more(more.size());
  ASSERT_TRUE(tree->FindPrefixSum(more, found_more).ok());
  EXPECT_EQ(found_more, (std::vector<int64_t>{2, 2, 6, 6, 6}));
}

INSTANTIATE_TEST_SUITE_P(Devices, PriorityTreeUpdateTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);
INSTANTIATE_TEST_SUITE_P(Devices, PriorityTreeCapacityOneTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);
INSTANTIATE_TEST_SUITE_P(Devices, PriorityTreeDescentTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);

}  // namespace
}  // namespace perserve::tree::testing
