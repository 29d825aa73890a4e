#include "tree/cpu/batched_descent.h"

#include <algorithm>

namespace perserve::tree {
namespace {

constexpr int kReadOnly = 0;
constexpr int kIntoL2 = 2;  // prefetcht1
constexpr int kIntoL1 = 3;  // prefetcht0
// How many lanes before its step a lane's pair is pulled from L2 into L1.
constexpr size_t kNearLanes = 16;

}  // namespace

// Each lane takes DescendStep (branch-free: a branch on a line still in flight
// is mispredicted half the time, and each misprediction throws away the loads
// issued behind it), then prefetches in two stages the sibling pair its next
// step reads:
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
void DescendBatch(const TreeNode* nodes, int64_t capacity, std::span<const double> masses,
                  std::span<int64_t> indices) {
  int64_t node[kDescentLanes];
  double mass[kDescentLanes];
  for (size_t base = 0; base < masses.size(); base += kDescentLanes) {
    const size_t lanes = std::min(kDescentLanes, masses.size() - base);
    for (size_t lane = 0; lane < lanes; ++lane) {
      node[lane] = 1;
      mass[lane] = masses[base + lane];
    }
    for (int64_t level_start = 1; level_start < capacity; level_start *= 2) {  // nodes [level_start, 2 level_start)
      for (size_t lane = 0; lane < lanes; ++lane) {
        if (lane + kNearLanes < lanes) __builtin_prefetch(&nodes[2 * node[lane + kNearLanes]], kReadOnly, kIntoL1);
        node[lane] = DescendStep(nodes, node[lane], &mass[lane]);
        if (node[lane] < capacity) __builtin_prefetch(&nodes[2 * node[lane]], kReadOnly, kIntoL2);
      }
    }
    for (size_t lane = 0; lane < lanes; ++lane) indices[base + lane] = node[lane] - capacity;
  }
}

}  // namespace perserve::tree
