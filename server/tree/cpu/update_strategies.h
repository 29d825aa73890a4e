// The CPU update strategies. Each writes the batch's leaves in order (so for a
// repeated index the last value wins) and then recomputes the internal nodes
// above them with tree_algorithm.h's RecomputeNode; they differ only in which
// nodes they recompute when, and give bit-identical trees. Callers validate the
// batch first (tree_validation.h). None is safe to run concurrently with
// another operation on the same nodes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tree/priority_tree.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree {

// Leaf-to-root walk per element, sum and min together. O(k log n).
void UpdatePerElement(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                      std::span<const double> values);

// Writes the leaves, then recomputes every internal node level by level from
// the bottom: sequential over levels (a parent must see both children's final
// values), parallel within a level. O(n + k) whatever k is.
void UpdateRebuild(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                   std::span<const double> values);

// Reusable buffers for UpdateSparse, sized once per tree so the update path
// does not allocate once warmed up.
struct SparseScratch {
  explicit SparseScratch(int64_t capacity) : seen(static_cast<size_t>(capacity), 0) {}
  std::vector<int64_t> level;       // distinct nodes of the current level
  std::vector<int64_t> next_level;  // distinct parents of `level`
  std::vector<uint8_t> seen;        // by internal node index: already in next_level
};

// Writes the leaves, then recomputes only the distinct parents of the touched
// nodes, one level at a time (level-synchronous: no node is written twice and
// no two writes in a level conflict). O(k log n) work.
void UpdateSparse(TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                  std::span<const double> values, SparseScratch* scratch);

// Runs the named concrete strategy (kAuto is resolved by the caller; here it
// means kSparse).
void UpdateWith(UpdateStrategy strategy, TreeNode* nodes, int64_t capacity, std::span<const int64_t> indices,
                std::span<const double> values, SparseScratch* scratch);

}  // namespace perserve::tree
