// DescendBatch: many descents at once, at the pace of the memory rather than
// of one descent's chain of dependent loads.
//
// A descent in a 2^21-leaf tree is a chain of dependent loads whose lower
// levels miss every cache (~170 ns each from DRAM here); one path after
// another, each level waits for the last. The paths of a batch are
// independent, so this advances up to kDescentLanes of them two levels at a
// time (one line: a node's four grandchildren, DescendTwoLevels) and asks
// for each path's next line as soon as it is known, keeping dozens of misses
// in flight: 11 lines a path instead of 21, and with the top levels cached
// (a serving loop) a pass is as much arithmetic as waiting, which the
// lanes' SSE2 steps (lane_steps.h) keep short.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tree/tree_algorithm.h"

namespace perserve::tree {

// Paths advanced together. A pass over the group must take longer than a
// line takes to arrive, or a lane waits for its line; and every group walks
// the top levels again, each level a dependent miss when they are cold.
// 256 and 512 measured alike at 512 cold descents on a quiet machine, 512
// ahead when the other core is busy; 32 was 1.2x slower quiet.
inline constexpr size_t kDescentLanes = 512;

// indices[i] = the leaf (0-based) the descent of masses[i] lands on, by
// tree_algorithm.h's DescendTwoLevels for every path: bit-identical to
// FindPrefixSumLeaf(nodes, capacity, masses[i]) for each i, whatever the batch
// size and order. Same preconditions: capacity a power of two, every mass
// finite and >= 0, the total (nodes[1].sum) > 0; sizes equal. Reads only;
// O(k log capacity) work, single-threaded.
void DescendBatch(const TreeNode* nodes, int64_t capacity, std::span<const double> masses,
                  std::span<int64_t> indices);

}  // namespace perserve::tree
