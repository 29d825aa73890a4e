// The descent's step spellings against one another, at every internal node of
// random trees, bit for bit (the leaf reached and the mass left):
// DescendTwoLevels (the grandchildren's line, the children's sums
// recomputed) against two DescendSteps, and the batched CPU descent's SSE2
// steps (lane_steps.h) against the portable ones they spell. Trees with zero,
// negative-zero and subnormal leaves and empty subtrees; masses at every
// node's boundaries, where a rounding slip or a different guard would show.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "server/tree/tree_test_util.h"
#include "tree/cpu/lane_steps.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree::testing {
namespace {

// Random leaves (RandomValue's zeros and subnormals, and some -0.0, which
// validation lets through as >= 0), a run of them set to zero.
ReferenceTree TreeWithEmptySubtrees(int64_t capacity, std::mt19937_64& rng) {
  ReferenceTree reference(capacity);
  for (int64_t leaf = 0; leaf < capacity; ++leaf) reference.Set(leaf, rng() % 16 == 0 ? -0.0 : RandomValue(rng));
  const int64_t zero_from = static_cast<int64_t>(rng() % static_cast<uint64_t>(capacity));
  for (int64_t leaf = zero_from; leaf < std::min(capacity, zero_from + capacity / 4 + 1); ++leaf) {
    reference.Set(leaf, 0.0);
  }
  return reference;
}

// Masses that decide at `node`: its left child's sum and its neighbours, the
// left grandchildren's, zero of either sign, the node's own sum and past it.
std::vector<double> MassesAt(const std::vector<TreeNode>& nodes, int64_t node, int64_t capacity,
                             std::mt19937_64& rng) {
  const double largest = std::numeric_limits<double>::max();
  std::vector<double> masses = {0.0, -0.0, std::numeric_limits<double>::denorm_min(), nodes[node].sum,
                                2.0 * nodes[node].sum + 1.0};
  std::vector<double> lefts = {nodes[2 * node].sum};
  if (2 * node < capacity) lefts.push_back(nodes[4 * node].sum);
  if (2 * node < capacity) lefts.push_back(nodes[2 * node].sum + nodes[4 * node + 2].sum);
  for (double left : lefts) {
    for (double mass : {left, std::nextafter(left, 0.0), std::nextafter(left, largest)}) masses.push_back(mass);
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 4; ++i) masses.push_back(unit(rng) * nodes[node].sum);
  return masses;
}

// Same node and the same mass bits.
::testing::AssertionResult SameStep(int64_t node_a, double mass_a, int64_t node_b, double mass_b) {
  if (node_a == node_b && std::memcmp(&mass_a, &mass_b, sizeof(double)) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "node " << node_a << " vs " << node_b << ", mass " << mass_a << " vs "
                                       << mass_b;
}

TEST(LaneStepsTest, EverySpellingOfAStepAgreesAtEveryNode) {
  std::mt19937_64 rng(36);
  int64_t checked_two_levels = 0, went_right = 0, went_left = 0;
  for (int64_t capacity : {int64_t{2}, int64_t{4}, int64_t{8}, int64_t{64}, int64_t{1} << 11}) {
    for (int round = 0; round < 3; ++round) {
      const std::vector<TreeNode> nodes = NodesOf(TreeWithEmptySubtrees(capacity, rng));
      for (int64_t node = 1; node < capacity; ++node) {
        for (double mass : MassesAt(nodes, node, capacity, rng)) {
          double portable = mass, lane = mass;
          const int64_t one = DescendStep(nodes.data(), node, &portable);
          const int64_t lane_one = LaneStep(nodes.data(), node, &lane);
          ASSERT_TRUE(SameStep(one, portable, lane_one, lane))
              << "LaneStep at node " << node << ", mass " << mass << ", capacity " << capacity;
          (one % 2 == 1 ? went_right : went_left) += 1;
          if (2 * node >= capacity) continue;  // no grandchildren below the leaves' parents
          double twice = mass, together = mass, lane_together = mass;
          const int64_t two = DescendStep(nodes.data(), DescendStep(nodes.data(), node, &twice), &twice);
          const int64_t portable_two = DescendTwoLevels(nodes.data(), node, &together);
          const int64_t lane_two = LaneTwoLevels(nodes.data(), node, &lane_together);
          ASSERT_TRUE(SameStep(two, twice, portable_two, together))
              << "DescendTwoLevels at node " << node << ", mass " << mass << ", capacity " << capacity;
          ASSERT_TRUE(SameStep(two, twice, lane_two, lane_together))
              << "LaneTwoLevels at node " << node << ", mass " << mass << ", capacity " << capacity;
          ++checked_two_levels;
        }
      }
    }
  }
  EXPECT_GT(checked_two_levels, 10000);
  EXPECT_GT(went_right, 1000) << "the masses never sent a step right";
  EXPECT_GT(went_left, 1000) << "the masses never sent a step left";
}

// The guard in each spelling: an empty right subtree is never entered, even
// by a mass at or past the node's sum, and a mass reaching exactly the left
// sum goes right when the right subtree holds something.
TEST(LaneStepsTest, NoSpellingStepsIntoAnEmptyRightSubtree) {
  const double left = 3.0;
  for (double right : {0.0, -0.0}) {
    // Node 1 over leaves {left, right}; node 1 over grandchildren {1, 2, right, right}.
    const std::vector<TreeNode> pair = {{}, {left + right, left}, {left, left}, {right, 0.0}};
    const std::vector<TreeNode> four = {{}, {left + 2 * right, 1.0}, {left, 1.0}, {2 * right, 0.0},
                                        {1.0, 1.0}, {2.0, 2.0}, {right, 0.0}, {right, 0.0}};
    for (double mass : {left, 2 * left, 1e300}) {
      double a = mass, b = mass, c = mass, d = mass;
      EXPECT_EQ(DescendStep(pair.data(), 1, &a), 2) << "mass " << mass;
      EXPECT_EQ(LaneStep(pair.data(), 1, &b), 2) << "mass " << mass;
      EXPECT_EQ(DescendTwoLevels(four.data(), 1, &c), 5) << "mass " << mass;
      EXPECT_EQ(LaneTwoLevels(four.data(), 1, &d), 5) << "mass " << mass;
    }
  }
  const std::vector<TreeNode> pair = {{}, {4.0, 1.0}, {3.0, 3.0}, {1.0, 1.0}};
  double a = 3.0, b = 3.0;
  EXPECT_EQ(DescendStep(pair.data(), 1, &a), 3);
  EXPECT_EQ(LaneStep(pair.data(), 1, &b), 3);
  EXPECT_EQ(a, 0.0);
  EXPECT_EQ(b, 0.0);
}

}  // namespace
}  // namespace perserve::tree::testing
