// UpdateWithExponent: leaves p^alpha computed where the tree lives. On the CPU
// they are std::pow exactly; on CUDA they must be within 2 ulp of it (the
// issue's bound; CUDA documents its pow as within 2 ulp of the exact power and
// glibc's is within about 0.52 ulp, and the largest distance seen is printed).
// Either way the tree above them is bit-exact for those leaves.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstring>
#include <limits>

#include "server/tree/tree_test_util.h"
#include "tree/tree_validation.h"

namespace perserve::tree::testing {
namespace {

// Distance in units in the last place between two finite doubles >= 0.
int64_t UlpDistance(double a, double b) {
  int64_t x, y;
  std::memcpy(&x, &a, sizeof(x));
  std::memcpy(&y, &b, sizeof(y));
  return x > y ? x - y : y - x;
}

class UpdateWithExponentTest : public DeviceTest {};

TEST_P(UpdateWithExponentTest, LeavesAreStdPowWithinTwoUlpAndTheTreeAboveIsBitExact) {
  const int64_t capacity = int64_t{1} << 12;
  const int64_t allowed_ulps = GetParam() == Device::kCuda ? 2 : 0;
  std::mt19937_64 rng(5);
  int64_t largest_distance = 0;
  for (double alpha : {0.6, 0.5, 1.0, 0.0, 1.7, 0.4}) {
    std::unique_ptr<PriorityTree> tree = Make(capacity);
    Batch batch = RandomBatch(rng, capacity, BatchShape::kAllLeaves);
    for (int j = 0; j < 50; ++j) {  // and some repeats: the last priority wins
      batch.indices.push_back(batch.indices[j]);
      batch.values.push_back(RandomValue(rng));
    }
    ASSERT_TRUE(tree->UpdateWithExponent(batch.indices, batch.values, alpha).ok());
    std::vector<double> last_priority(static_cast<size_t>(capacity));
    for (size_t j = 0; j < batch.indices.size(); ++j) last_priority[batch.indices[j]] = batch.values[j];
    std::vector<int64_t> all(static_cast<size_t>(capacity));
    for (int64_t i = 0; i < capacity; ++i) all[i] = i;
    std::vector<double> leaves(all.size());
    ASSERT_TRUE(tree->Get(all, leaves).ok());
    ReferenceTree reference(capacity);
    for (int64_t i = 0; i < capacity; ++i) {
      // The contract: std::pow, never below the smallest normal double.
      const double expected = std::max(std::pow(last_priority[i], alpha), std::numeric_limits<double>::min());
      largest_distance = std::max(largest_distance, UlpDistance(leaves[i], expected));
      ASSERT_LE(UlpDistance(leaves[i], expected), allowed_ulps)
          << "leaf " << i << ": " << last_priority[i] << "^" << alpha << " = " << leaves[i] << ", std::pow says "
          << expected;
      reference.Set(i, leaves[i]);
    }
    ASSERT_TRUE(NodesMatch(*tree, reference)) << "alpha " << alpha;
  }
  std::cout << "largest distance from std::pow: " << largest_distance << " ulp\n";
  RecordProperty("largest_ulp_distance", static_cast<int>(largest_distance));
}

TEST_P(UpdateWithExponentTest, RejectsBadAlphaAndOverflowingPrioritiesWithoutAChange) {
  std::unique_ptr<PriorityTree> tree = Make(16);
  ASSERT_TRUE(tree->UpdateWithExponent(std::vector<int64_t>{1, 2}, std::vector<double>{4.0, 9.0}, 0.5).ok());
  EXPECT_EQ(tree->Total(), 5.0);
  std::vector<double> sums(32), mins(32), after_sums(32), after_mins(32);
  ASSERT_TRUE(tree->ReadNodes(sums, mins).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::vector<double> priorities;
    double alpha;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {{1.0, 1.0}, nan, "alpha nan"},
      {{1.0, 1.0}, -0.5, "alpha -0.5"},
      {{1.0, 1.0}, inf, "alpha inf"},
      {{1.0, -2.0}, 0.5, "position 1 is negative"},
      {{nan, 1.0}, 0.5, "position 0 is NaN"},
      {{1.0, 1e300}, 2.0, "priority 1e+300 at position 1 overflows p^alpha"},
  };
  for (const Case& c : cases) {
    const Status status = tree->UpdateWithExponent(std::vector<int64_t>{3, 4}, c.priorities, c.alpha);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(c.mention), std::string::npos)
        << "message \"" << status.message() << "\" lacks \"" << c.mention << "\"";
    ASSERT_TRUE(tree->ReadNodes(after_sums, after_mins).ok());
    EXPECT_TRUE(after_sums == sums && after_mins == mins) << "a rejected batch changed the tree";
  }
  // p^alpha finite but past the tree's largest total: refused too.
  const double finite_but_past = std::pow(std::numeric_limits<double>::max(), 1.0 / 2.0) * (1.0 - 1e-11);
  const Status past = tree->UpdateWithExponent(std::vector<int64_t>{5}, std::vector<double>{finite_but_past}, 2.0);
  EXPECT_EQ(past.code(), Status::Code::kInvalidArgument) << past.ToString();
  ASSERT_TRUE(tree->ReadNodes(after_sums, after_mins).ok());
  EXPECT_TRUE(after_sums == sums && after_mins == mins) << "a refused batch changed the tree";
  // Just inside the limit: accepted, and the leaf is large but finite.
  const double near = std::pow(kMaxTreeTotal, 1.0 / 2.0) * (1.0 - 1e-6);
  ASSERT_TRUE(tree->UpdateWithExponent(std::vector<int64_t>{5}, std::vector<double>{near}, 2.0).ok());
  EXPECT_TRUE(std::isfinite(tree->Total()));
  EXPECT_GT(tree->Total(), kMaxTreeTotal * 0.99);
}

// Issue 25: with alpha 2 a priority of 1e-200 has the power 0 (it underflows),
// and a leaf of 0 made the tree's min 0 and every importance weight 0. A power
// below the smallest normal double (0, or subnormal) is clamped up to it: the
// leaf is never 0, nor subnormal, and the min stays positive.
TEST_P(UpdateWithExponentTest, PowersThatUnderflowAreClampedToTheSmallestNormalLeaf) {
  constexpr double kSmallestNormal = std::numeric_limits<double>::min();
  std::unique_ptr<PriorityTree> tree = Make(8);
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4};
  const std::vector<double> priorities = {1e-200, 1e-160, 0.0, 4.0, 4.9e-324};
  ASSERT_TRUE(tree->UpdateWithExponent(indices, priorities, 2.0).ok());
  std::vector<double> leaves(indices.size());
  ASSERT_TRUE(tree->Get(indices, leaves).ok());
  // 1e-200^2 underflows to 0, 1e-160^2 = 1e-320 is subnormal, 0^2 = 0.
  EXPECT_EQ(leaves, (std::vector<double>{kSmallestNormal, kSmallestNormal, kSmallestNormal, 16.0, kSmallestNormal}));
  EXPECT_EQ(tree->Min(), kSmallestNormal);
  EXPECT_EQ(tree->Total(), 16.0 + 4 * kSmallestNormal);
  // Powers at or above it are kept exactly, and alpha 0 gives 1 for any priority (0 included).
  ASSERT_TRUE(tree->UpdateWithExponent(std::vector<int64_t>{5}, std::vector<double>{std::sqrt(kSmallestNormal)}, 2.0)
                  .ok());
  ASSERT_TRUE(tree->UpdateWithExponent(std::vector<int64_t>{6}, std::vector<double>{0.0}, 0.0).ok());
  std::vector<double> more(2);
  ASSERT_TRUE(tree->Get(std::vector<int64_t>{5, 6}, more).ok());
  EXPECT_EQ(more[0], std::pow(std::sqrt(kSmallestNormal), 2.0));
  EXPECT_EQ(more[1], 1.0);
  // Every node above is as the oracle builds it from those leaves.
  ReferenceTree reference(8);
  std::vector<double> all(8);
  ASSERT_TRUE(tree->Get(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, all).ok());
  for (int64_t i = 0; i < 8; ++i) reference.Set(i, all[i]);
  EXPECT_TRUE(NodesMatch(*tree, reference));
}

INSTANTIATE_TEST_SUITE_P(Devices, UpdateWithExponentTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);

}  // namespace
}  // namespace perserve::tree::testing
