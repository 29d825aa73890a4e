#include "tree/cpu/batched_descent.h"

#include <algorithm>
#include <bit>

#include "tree/cpu/lane_steps.h"

namespace perserve::tree {
namespace {

constexpr int kReadOnly = 0;
constexpr int kIntoL2 = 2;  // prefetcht1
constexpr int kIntoL1 = 3;  // prefetcht0
// How many lanes before its step a lane's line is pulled from L2 into L1.
constexpr size_t kNearLanes = 16;
// Lines of nodes below this index (the top 9 levels, 8 KiB) are crossed by
// every batch: the first lanes bring them in and the rest find them cached,
// so prefetching them only costs instructions (skipping it measured 6-8%
// faster, warm and cold).
constexpr int64_t kFirstPrefetchedNode = 512;

// Advances lanes [0, lanes) two levels (LaneTwoLevels), each reading its
// node's grandchildren. `near`: this pass's lines are prefetched into L1
// kNearLanes lanes ahead; `far`: each lane prefetches the line its next pass
// reads into L2 as soon as it knows it.
template <bool kNear, bool kFar>
void TwoLevelPass(const TreeNode* nodes, size_t lanes, int64_t* node, double* mass) {
  size_t lane = 0;
  const auto step = [&] {
    node[lane] = LaneTwoLevels(nodes, node[lane], &mass[lane]);
    if (kFar) __builtin_prefetch(&nodes[4 * node[lane]], kReadOnly, kIntoL2);
  };
  if (kNear) {
    for (; lane + kNearLanes < lanes; ++lane) {
      __builtin_prefetch(&nodes[4 * node[lane + kNearLanes]], kReadOnly, kIntoL1);
      step();
    }
  }
  for (; lane < lanes; ++lane) step();
}

}  // namespace

// Each lane takes LaneTwoLevels (branch-free: a branch on a line still in
// flight is mispredicted half the time, and each misprediction throws away
// the loads issued behind it), two levels for each line it reads, and
// prefetches in two stages the line its next pass reads:
//  - far, into L2, as soon as the lane knows its next node, a whole pass
//    before the step. This core keeps ~17 L1 misses in flight (k pointer
//    chains: 10 ns a line for k >= 32) but about twice as many L2 misses
//    (5 ns a line, prefetcht1 64 lines ahead); 512 cold descents took 57 us
//    this way against 100 us with prefetcht0 alone, on a quiet machine.
//  - near, into L1, kNearLanes lanes before the step. With the other core
//    busy (this VM's two cores share caches with their neighbours), lines
//    prefetched to L2 alone were often evicted before their step and the
//    descents took 1.4-2.3x longer than with prefetcht0; the near stage
//    brings them back from wherever they went in time (measured 1.2-1.5x
//    faster than prefetcht0 alone under that load, and a few % faster quiet).
// An odd number of levels starts with one LaneStep from the root (its pair
// is always cached), so that every pass below ends on a line's boundary and
// the last one reads four leaves.
void DescendBatch(const TreeNode* nodes, int64_t capacity, std::span<const double> masses,
                  std::span<int64_t> indices) {
  const int levels = std::countr_zero(static_cast<uint64_t>(capacity));
  int64_t node[kDescentLanes];
  double mass[kDescentLanes];
  for (size_t base = 0; base < masses.size(); base += kDescentLanes) {
    const size_t lanes = std::min(kDescentLanes, masses.size() - base);
    for (size_t lane = 0; lane < lanes; ++lane) {
      node[lane] = 1;
      mass[lane] = masses[base + lane];
    }
    int depth = 0;  // of every lane's node
    if (levels % 2 == 1) {
      for (size_t lane = 0; lane < lanes; ++lane) node[lane] = LaneStep(nodes, node[lane], &mass[lane]);
      depth = 1;
    }
    for (; depth < levels; depth += 2) {
      // This pass reads nodes from 4 << depth on, the next from 16 << depth.
      const bool near = (int64_t{4} << depth) >= kFirstPrefetchedNode;
      const bool far = depth + 2 < levels && (int64_t{16} << depth) >= kFirstPrefetchedNode;
      if (near) {
        far ? TwoLevelPass<true, true>(nodes, lanes, node, mass) : TwoLevelPass<true, false>(nodes, lanes, node, mass);
      } else {
        far ? TwoLevelPass<false, true>(nodes, lanes, node, mass)
            : TwoLevelPass<false, false>(nodes, lanes, node, mass);
      }
    }
    for (size_t lane = 0; lane < lanes; ++lane) indices[base + lane] = node[lane] - capacity;
  }
}

}  // namespace perserve::tree
