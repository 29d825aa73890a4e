#include "tree/cpu/update_strategies.h"

#include <algorithm>

namespace perserve::tree {
namespace {

// Rebuild levels smaller than this are recomputed by one thread:
// below it the fork/join costs more than the work.
constexpr int64_t kParallelGrain = int64_t{1} << 14;

// The update loops prefetch this many elements ahead: a random leaf's path
// misses the cache at every level below the top few, and the walks of
// different elements are independent, so their misses can overlap. 8 ahead
// measured 2.5x faster than none on a 2^21 tree (16 was no better).
constexpr int64_t kPrefetchAhead = 8;
// Nodes above this index (the top 10 levels, 16 KiB) stay cached; prefetching
// them only costs instructions.
constexpr int64_t kAlwaysCachedNodes = 1024;

// Asks for the lines of every uncached node on `leaf_node`'s path to the root,
// for writing.
inline void PrefetchPath(TreeNode* nodes, int64_t leaf_node) {
  for (int64_t node = leaf_node; node >= kAlwaysCachedNodes; node >>= 1) __builtin_prefetch(&nodes[node], 1);
}

void WriteLeaves(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                 std::span<const double> values) {
  const size_t k = indices.size();
  for (size_t j = 0; j < std::min<size_t>(k, kPrefetchAhead); ++j) {
    __builtin_prefetch(&nodes[LeafNode(capacity, indices[j])], 1);
  }
  for (size_t j = 0; j < k; ++j) {
    if (j + kPrefetchAhead < k) __builtin_prefetch(&nodes[LeafNode(capacity, indices[j + kPrefetchAhead])], 1);
    WriteLeaf(nodes, capacity, indices[j], values[j]);
  }
}

// The thread-count test sits outside the pragma: an OpenMP `if` clause that is
// false still enters the runtime, which costs more than a small level's work.
void RecomputeLevel(TreeNode* nodes, int64_t first, int64_t last) {
  if (last - first < kParallelGrain) {
    for (int64_t node = first; node < last; ++node) RecomputeNode(nodes, node);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t node = first; node < last; ++node) RecomputeNode(nodes, node);
}

// Recomputes each distinct parent of `level` (nodes one level below, all
// final) as soon as it is first seen, and lists the parents in `parents`.
// Duplicates next to each other are caught by a comparison, which is all a
// sorted level needs (its parents are sorted too: the replay's updates come
// from sorted descents and consecutive ring slots). An unsorted level also
// checks `seen`, which is cleared again before returning.
void RecomputeDistinctParents(TreeNode* nodes, const std::vector<int64_t>& level, bool sorted,
                              std::vector<int64_t>* parents, std::vector<uint8_t>* seen) {
  parents->clear();
  uint8_t* marks = seen->data();
  int64_t previous = 0;  // no parent is 0
  const size_t count = level.size();
  for (size_t j = 0; j < count; ++j) {
    if (j + 2 * kPrefetchAhead < count) __builtin_prefetch(&nodes[level[j + 2 * kPrefetchAhead] >> 1], 1);
    const int64_t parent = level[j] >> 1;
    if (parent == previous || (!sorted && marks[parent])) continue;
    if (!sorted) marks[parent] = 1;
    previous = parent;
    RecomputeNode(nodes, parent);
    parents->push_back(parent);
  }
  if (!sorted) {
    for (int64_t parent : *parents) marks[parent] = 0;
  }
}

}  // namespace

void UpdatePerElement(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                      std::span<const double> values) {
  const size_t k = indices.size();
  // The first elements' paths too: without them a small batch (an actor's 8
  // or 50) walks its first 8 paths one cache miss after another.
  for (size_t j = 0; j < std::min<size_t>(k, kPrefetchAhead); ++j) PrefetchPath(nodes, LeafNode(capacity, indices[j]));
  for (size_t j = 0; j < k; ++j) {
    if (j + kPrefetchAhead < k) PrefetchPath(nodes, LeafNode(capacity, indices[j + kPrefetchAhead]));
    WriteLeaf(nodes, capacity, indices[j], values[j]);
    PropagateToRoot(nodes, capacity, indices[j]);
  }
}

void UpdateRebuild(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                   std::span<const double> values) {
  WriteLeaves(nodes, capacity, indices, values);
  // Level [first, 2 * first) reads level [2 * first, 4 * first), finished in the
  // previous iteration: the implicit barrier at the end of each parallel loop is
  // what keeps a parent from summing children not yet written.
  for (int64_t first = capacity >> 1; first >= 1; first >>= 1) RecomputeLevel(nodes, first, 2 * first);
}

void UpdateSparse(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                  std::span<const double> values, SparseScratch* scratch) {
  WriteLeaves(nodes, capacity, indices, values);
  if (indices.empty() || capacity == 1) return;  // no internal node to recompute
  std::vector<int64_t>& level = scratch->level;
  level.clear();
  for (int64_t index : indices) level.push_back(LeafNode(capacity, index));
  const bool sorted = std::is_sorted(level.begin(), level.end());
  // Each pass recomputes one level's distinct parents; the root's level has one node.
  do {
    RecomputeDistinctParents(nodes, level, sorted, &scratch->next_level, &scratch->seen);
    level.swap(scratch->next_level);
  } while (level.front() != 1);
}

void UpdateWith(UpdateStrategy strategy, TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                std::span<const double> values, SparseScratch* scratch) {
  switch (strategy) {
    case UpdateStrategy::kPerElement:
      UpdatePerElement(nodes, capacity, indices, values);
      return;
    case UpdateStrategy::kRebuild:
      UpdateRebuild(nodes, capacity, indices, values);
      return;
    case UpdateStrategy::kSparse:
    case UpdateStrategy::kAuto:
      UpdateSparse(nodes, capacity, indices, values, scratch);
      return;
  }
}

}  // namespace perserve::tree
