// The CUDA backend's update, run on the host: tree_algorithm.h's
// level-synchronous steps (LastOfRun, RecomputeAncestorOnce) in loops that
// stand in for the GPU's threads, in scrambled thread order, against the
// reference tree bit for bit. So the GPU's logic is tested on every machine,
// not only where a GPU is; the CUDA suites then test the kernels around it.
#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "server/tree/tree_test_util.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree::testing {
namespace {

::testing::AssertionResult SameNodes(const std::vector<TreeNode>& nodes, const ReferenceTree& reference) {
  for (size_t node = 1; node < nodes.size(); ++node) {
    if (std::memcmp(&nodes[node].sum, &reference.sums()[node], sizeof(double)) != 0 ||
        std::memcmp(&nodes[node].min, &reference.mins()[node], sizeof(double)) != 0) {
      return ::testing::AssertionFailure() << "node " << node << ": (sum " << nodes[node].sum << ", min "
                                           << nodes[node].min << "), reference (sum " << reference.sums()[node]
                                           << ", min " << reference.mins()[node] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// One sparse update as the GPU runs it, each "thread" loop in a random order.
void LevelSynchronousUpdate(const Batch& batch, int64_t capacity, std::mt19937_64& rng,
                            std::vector<TreeNode>* nodes) {
  const int64_t count = static_cast<int64_t>(batch.indices.size());
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return batch.indices[a] < batch.indices[b]; });
  std::vector<int64_t> sorted_leaves(order.size());
  std::vector<double> sorted_values(order.size());
  for (size_t j = 0; j < order.size(); ++j) {
    sorted_leaves[j] = batch.indices[order[j]];
    sorted_values[j] = batch.values[order[j]];
  }
  std::vector<int64_t> threads(static_cast<size_t>(count));
  std::iota(threads.begin(), threads.end(), 0);
  std::shuffle(threads.begin(), threads.end(), rng);
  for (int64_t j : threads) {
    if (LastOfRun(sorted_leaves.data(), count, j)) WriteLeaf(nodes->data(), capacity, sorted_leaves[j], sorted_values[j]);
  }
  const int levels = std::countr_zero(static_cast<uint64_t>(capacity));
  for (int height = 1; height <= levels; ++height) {
    std::shuffle(threads.begin(), threads.end(), rng);
    std::set<int64_t> distinct;
    int64_t recomputed = 0;
    for (int64_t j : threads) {
      distinct.insert(LeafNode(capacity, sorted_leaves[j]) >> height);
      recomputed += RecomputeAncestorOnce(nodes->data(), capacity, sorted_leaves.data(), j, height);
    }
    ASSERT_EQ(recomputed, static_cast<int64_t>(distinct.size())) << "height " << height << ": each ancestor once";
  }
}

TEST(LevelSynchronousUpdateTest, TheGpuStepsRunOnTheHostMatchTheReference) {
  for (int64_t capacity : {int64_t{1}, int64_t{2}, int64_t{16}, int64_t{1} << 12}) {
    std::vector<TreeNode> nodes(static_cast<size_t>(2 * capacity),
                                TreeNode{0.0, std::numeric_limits<double>::infinity()});
    ReferenceTree reference(capacity);
    std::mt19937_64 rng(77 + static_cast<uint64_t>(capacity));
    for (BatchShape shape : {BatchShape::kAllLeaves, BatchShape::kRandom, BatchShape::kDuplicates,
                             BatchShape::kSiblings, BatchShape::kZeroRun, BatchShape::kDuplicates}) {
      const Batch batch = RandomBatch(rng, capacity, shape);
      LevelSynchronousUpdate(batch, capacity, rng, &nodes);
      if (HasFatalFailure()) return;
      ApplyToReference(batch, &reference);
      ASSERT_TRUE(SameNodes(nodes, reference))
          << "capacity " << capacity << ", batch of " << batch.indices.size() << " (shape " << static_cast<int>(shape)
          << ")";
    }
  }
}

}  // namespace
}  // namespace perserve::tree::testing
