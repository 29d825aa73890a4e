#include "tree/cpu/batched_descent.h"

#include <algorithm>

namespace perserve::tree {
namespace {

constexpr int kReadOnly = 0;
constexpr int kIntoL2 = 2;  // prefetcht1
constexpr int kIntoL1 = 3;  // prefetcht0
// How many lanes before its step a lane's pair is pulled from L2 into L1.
constexpr size_t kNearLanes = 16;
// Steps from the nodes above this level (indices below it) read pairs among
// nodes 2-511: 8 KiB that every path crosses, which the first lanes bring in
// and the rest find cached, so prefetching them only costs instructions
// (skipping it measured 6-8% faster, warm and cold).
constexpr int64_t kFirstPrefetchedLevel = 256;

// Advances lanes [0, lanes) one level, with both prefetch stages.
void StepAndPrefetch(const TreeNode* nodes, int64_t capacity, size_t lanes, int64_t* node, double* mass) {
  const auto step = [&](size_t lane) {
    node[lane] = DescendStep(nodes, node[lane], &mass[lane]);
    if (node[lane] < capacity) __builtin_prefetch(&nodes[2 * node[lane]], kReadOnly, kIntoL2);
  };
  const size_t with_near = lanes > kNearLanes ? lanes - kNearLanes : 0;
  size_t lane = 0;
  for (; lane < with_near; ++lane) {
    __builtin_prefetch(&nodes[2 * node[lane + kNearLanes]], kReadOnly, kIntoL1);
    step(lane);
  }
  for (; lane < lanes; ++lane) step(lane);
}

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
    int64_t level_start = 1;  // the level's nodes are [level_start, 2 level_start)
    for (; level_start < std::min(capacity, kFirstPrefetchedLevel); level_start *= 2) {
      for (size_t lane = 0; lane < lanes; ++lane) node[lane] = DescendStep(nodes, node[lane], &mass[lane]);
    }
    for (; level_start < capacity; level_start *= 2) StepAndPrefetch(nodes, capacity, lanes, node, mass);
    for (size_t lane = 0; lane < lanes; ++lane) indices[base + lane] = node[lane] - capacity;
  }
}

}  // namespace perserve::tree
