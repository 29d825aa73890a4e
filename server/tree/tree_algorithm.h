// The priority tree's per-element algorithm: one node, one level, one descent.
//
// Every function here is plain inline code marked PERSERVE_HOST_DEVICE, so the
// CPU backend calls it in loops and the CUDA kernels call it once per thread:
// one algorithm, two machines, and the CPU tests exercise the GPU's logic.
//
// Layout (docs/design.md, the tree's contract): a flat implicit tree of 2 * capacity
// TreeNode slots, root at 1, leaf i at capacity + i, slot 0 unused. Sum and min
// are interleaved as one 16-byte node, so the sibling pair (2p, 2p + 1) that a
// recompute or a descent step reads is one 32-byte, cache-line-aligned block:
// an update touches one line per level instead of two (one per array), and a
// descent reads one line per two levels (DescendTwoLevels: a node's four
// grandchildren are one 64-byte line).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__CUDACC__)
#define PERSERVE_HOST_DEVICE __host__ __device__
#else
#define PERSERVE_HOST_DEVICE
#endif

namespace perserve::tree {

struct TreeNode {
  double sum;  // sum of the leaf values below (the leaf's value at a leaf)
  double min;  // min of the positive leaf values below; +inf when there is none
};
static_assert(sizeof(TreeNode) == 16, "sibling pairs must pack into 32 bytes");

// The sums and differences of the bit-identical paths (node combine, descent),
// rounded once each, to nearest. On the device these are the explicit-rounding
// intrinsics, which nvcc never contracts into a fused multiply-add with a
// neighbouring product, whatever -fmad says and whatever a later edit puts
// beside them (an FMA rounds once where the host rounds twice, and the CPU and
// CUDA trees would differ in the last bit). The tree's CUDA translation unit is
// also compiled with --fmad=false (server/CMakeLists.txt). On the host, plain
// IEEE arithmetic: g++ contracts only a product and a sum, and none is here.
PERSERVE_HOST_DEVICE inline double AddRounded(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

PERSERVE_HOST_DEVICE inline double SubtractRounded(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

// An internal node is always left + right and min(left, right), in that order,
// so every strategy and backend produces bit-identical trees for the same leaves.
PERSERVE_HOST_DEVICE inline TreeNode CombineChildren(const TreeNode& left, const TreeNode& right) {
  return TreeNode{AddRounded(left.sum, right.sum), right.min < left.min ? right.min : left.min};
}

PERSERVE_HOST_DEVICE inline int64_t LeafNode(int64_t capacity, int64_t leaf_index) {
  return capacity + leaf_index;
}

PERSERVE_HOST_DEVICE inline double PositiveInfinity() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff0000000000000LL);
#else
  return std::numeric_limits<double>::infinity();
#endif
}

// A leaf of value 0 is an empty slot: never drawn (the descent's guard), and
// not part of the min either, which holds +inf there as for a leaf never set.
// The min is what importance weights divide by (w = (leaf / min)^-beta): a
// zero there would turn every weight into 0. So the min is that of the
// drawable leaves, the only ones a weight is ever computed for.
PERSERVE_HOST_DEVICE inline void WriteLeaf(TreeNode* nodes, int64_t capacity, int64_t leaf_index,
                                           double value) {
  nodes[LeafNode(capacity, leaf_index)] = TreeNode{value, value > 0.0 ? value : PositiveInfinity()};
}

// Recomputes internal node `node` from its two children.
PERSERVE_HOST_DEVICE inline void RecomputeNode(TreeNode* nodes, int64_t node) {
  nodes[node] = CombineChildren(nodes[2 * node], nodes[2 * node + 1]);
}

// Walks from leaf `leaf_index` to the root, recomputing every ancestor.
// O(log capacity). Not safe to run concurrently with another update.
PERSERVE_HOST_DEVICE inline void PropagateToRoot(TreeNode* nodes, int64_t capacity, int64_t leaf_index) {
  for (int64_t node = LeafNode(capacity, leaf_index) >> 1; node >= 1; node >>= 1) {
    RecomputeNode(nodes, node);
  }
}

// The descent's rule at internal node `node` with children sums `left` and
// `right`: docs/design.md's "go left if left_sum > mass, else mass -= left_sum and go
// right", plus one guard: never step into a right subtree whose sum is 0.
// Rounding in the subtractions can leave a mass that reaches past its
// subtree's sum (or a caller's mass can reach the total); the plain rule then
// walks right into an all-zero subtree and returns an empty leaf. The guard
// goes left instead. A descent starts at a positive total and so only ever
// stands on a node whose sum is > 0, whose children are then never both 0:
// the guard keeps the walk inside non-empty subtrees, and it only fires where
// the plain rule would enter an all-zero subtree, so wherever the plain
// descent lands on a non-zero leaf the guarded one lands on the same leaf.
// (Sums are never negative, so "right > 0" is "right != 0"; the form with one
// comparison each is the cheapest branch-free one, and the batched CPU
// descent measured it 20% faster than "right == 0 and left > 0".)
PERSERVE_HOST_DEVICE inline bool DescendsRight(double left, double right, double mass) {
  return (left <= mass) & (right > 0.0);
}

// `value` when `keep`, else +0.0, without a branch. Exact: the bits are either
// all kept or all cleared, so no arithmetic (and no inf * 0) is involved.
PERSERVE_HOST_DEVICE inline double KeepIf(bool keep, double value) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(__double_as_longlong(value) & -static_cast<long long>(keep));
#else
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits &= -static_cast<uint64_t>(keep);
  std::memcpy(&value, &bits, sizeof(bits));
  return value;
#endif
}

// One step of the descent from internal node `node`, without branches: the
// form for many descents in flight at once (interleaved CPU lanes, one GPU
// thread each). A branch on a value still being loaded would be mispredicted
// half the time, and every misprediction discards the loads issued for the
// other descents behind it; measured 1.6x slower on the CPU.
PERSERVE_HOST_DEVICE inline int64_t DescendStep(const TreeNode* nodes, int64_t node, double* mass) {
  const double left = nodes[2 * node].sum;
  const bool right = DescendsRight(left, nodes[2 * node + 1].sum, *mass);
  *mass = SubtractRounded(*mass, KeepIf(right, left));
  return 2 * node + right;
}

// Two steps of DescendStep from `node` in one read: its four grandchildren
// (nodes 4 node .. 4 node + 3), one 64-byte line of the line-aligned array,
// where two DescendSteps read a line per level. Its children's sums are
// recomputed from them, and equal the stored ones bit for bit: an internal
// node's sum is always AddRounded of its children's (CombineChildren), and
// the same sum of the same two values rounds the same way on either machine.
// So the leaf reached and the mass left are exactly two DescendSteps'. The
// caller guarantees the grandchildren exist (node below capacity / 2).
PERSERVE_HOST_DEVICE inline int64_t DescendTwoLevels(const TreeNode* nodes, int64_t node, double* mass) {
  const TreeNode* grandchildren = &nodes[4 * node];
  const double left = AddRounded(grandchildren[0].sum, grandchildren[1].sum);
  const bool first = DescendsRight(left, AddRounded(grandchildren[2].sum, grandchildren[3].sum), *mass);
  *mass = SubtractRounded(*mass, KeepIf(first, left));
  const TreeNode* children = grandchildren + 2 * static_cast<int>(first);
  const bool second = DescendsRight(children[0].sum, children[1].sum, *mass);
  *mass = SubtractRounded(*mass, KeepIf(second, children[0].sum));
  return 4 * node + 2 * static_cast<int64_t>(first) + static_cast<int64_t>(second);
}

// The whole descent for one mass, returning the leaf index (0-based): the
// rule of DescendsRight spelled with branches, the plain comparison first and
// the rarely taken guard second. Alone, a descent is one chain of dependent
// loads, and speculating down the predicted side overlaps them (measured
// ~2.5x faster than the branch-free step for a lone descent, and ~20% faster
// than branching once on DescendsRight). Tests hold the two spellings equal.
// The caller guarantees capacity is a power of two, mass is finite and >= 0,
// and the total (nodes[1].sum) is > 0; the result's leaf value is then > 0.
PERSERVE_HOST_DEVICE inline int64_t FindPrefixSumLeaf(const TreeNode* nodes, int64_t capacity, double mass) {
  int64_t node = 1;
  while (node < capacity) {
    const double left = nodes[2 * node].sum;
    if (left > mass) {
      node = 2 * node;
    } else if (!(nodes[2 * node + 1].sum > 0.0)) {
      node = 2 * node;  // the guard: never step into an empty right subtree
    } else {
      mass = SubtractRounded(mass, left);
      node = 2 * node + 1;
    }
  }
  return node - capacity;
}

// Splits `count` nodes into separate sum and min arrays (ReadNodes).
inline void SplitNodes(const TreeNode* nodes, int64_t count, double* sums, double* mins) {
  for (int64_t i = 0; i < count; ++i) {
    sums[i] = nodes[i].sum;
    mins[i] = nodes[i].min;
  }
}

// ---- Level-synchronous updates over a sorted batch (the CUDA backend's form)
//
// The batch's leaf indices are sorted stably (repeated leaves keep their batch
// order), and element j of the sorted batch is one thread. No two threads write
// the same node at the same time, and the result does not depend on timing:
//   1. element j writes its leaf only if it is the last of its run of equal
//      leaves, i.e. the last in batch order: the last value wins;
//   2. then, one level at a time from the leaves' parents up (all threads
//      finish a level before any starts the next), element j recomputes its
//      leaf's ancestor at that level only if element j - 1's ancestor there is
//      a different node: each distinct ancestor exactly once.

PERSERVE_HOST_DEVICE inline bool LastOfRun(const int64_t* sorted_leaves, int64_t count, int64_t j) {
  return j + 1 == count || sorted_leaves[j + 1] != sorted_leaves[j];
}

// Step 2 for element j at `height` levels above the leaves (1 = their
// parents). Returns whether element j was the one to recompute its ancestor.
PERSERVE_HOST_DEVICE inline bool RecomputeAncestorOnce(TreeNode* nodes, int64_t capacity,
                                                       const int64_t* sorted_leaves, int64_t j, int height) {
  const int64_t ancestor = LeafNode(capacity, sorted_leaves[j]) >> height;
  const bool first = j == 0 || (LeafNode(capacity, sorted_leaves[j - 1]) >> height) != ancestor;
  if (first) RecomputeNode(nodes, ancestor);
  return first;
}

// ---- Leaf values and sampling masses

// The smallest leaf a priority is given: the smallest normal double, 2^-1022.
inline constexpr double kSmallestLeaf = 0x1p-1022;

// A priority's leaf value p^alpha: std::pow on the host, CUDA's pow (within 2
// ulp of the exact power, as CUDA documents it) on the device; never below
// kSmallestLeaf. A power that underflows (1e-200 at alpha 2), is subnormal,
// or is 0 (a zero priority at alpha > 0) is clamped up to it rather than
// refused: a tiny TD error is a valid learner output that means "almost never
// draw this", and refusing it would refuse the learner's whole update. The
// clamped leaf is drawn with a vanishing probability, as meant, but it is
// never 0 and never subnormal, so the min that importance weights divide by is
// never 0 and a weight's ratio keeps full precision down to it. (Powers that
// overflow are refused instead, before any leaf changes: tree_validation.h.)
PERSERVE_HOST_DEVICE inline double LeafFromPriority(double priority, double alpha) {
#if defined(__CUDA_ARCH__)
  const double power = ::pow(priority, alpha);
#else
  const double power = std::pow(priority, alpha);
#endif
  return power < kSmallestLeaf ? kSmallestLeaf : power;
}

// Stratified sampling (docs/design.md): the total split into `batch` equal segments,
// draw i at fraction `unit` (in (0, 1]) of segment i.
PERSERVE_HOST_DEVICE inline double StratifiedMass(int64_t i, double unit, double total, int64_t batch) {
  return (static_cast<double>(i) + unit) * total / static_cast<double>(batch);
}

// 64 random bits to a double in (0, 1], as curand's uniform doubles: the top 53
// bits plus half a step (1 - 2^-54 rounds to 1).
PERSERVE_HOST_DEVICE inline double UnitFromBits(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1p-53;
}

}  // namespace perserve::tree
