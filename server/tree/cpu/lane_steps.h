// The batched descent's per-lane steps: tree_algorithm.h's DescendStep and
// DescendTwoLevels, the same comparisons, sums and differences on the same
// values, spelled with SSE2 (every x86-64 CPU has it) so that the rule's
// outcome stays a mask in a vector register. Spelled with bools, g++ turns
// the rule into setcc instructions that write the low byte of a register
// still holding an earlier lane's value: the false dependency chains lane to
// lane, and 512 descents that should overlap run one after another (the
// portable two-level step measured 2.6x slower than this one on a cached
// tree, the portable one-level step 1.1-1.25x). Elsewhere these are the
// portable steps. tests/server/tree/lane_steps_test.cc holds them equal.
#pragma once

#include <cstdint>

#include "tree/tree_algorithm.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace perserve::tree {

#if defined(__SSE2__)

// DescendsRight in the low lane: all ones when the walk goes right, else 0.
inline __m128d DescendsRightMask(__m128d left, __m128d right, __m128d mass) {
  return _mm_and_pd(_mm_cmple_sd(left, mass), _mm_cmplt_sd(_mm_setzero_pd(), right));
}

// DescendStep.
inline int64_t LaneStep(const TreeNode* nodes, int64_t node, double* mass) {
  const __m128d left = _mm_load_sd(&nodes[2 * node].sum);
  const __m128d before = _mm_load_sd(mass);
  const __m128d right = DescendsRightMask(left, _mm_load_sd(&nodes[2 * node + 1].sum), before);
  _mm_store_sd(mass, _mm_sub_sd(before, _mm_and_pd(right, left)));
  return 2 * node + (_mm_movemask_pd(right) & 1);
}

// DescendTwoLevels: both children's sums in one packed addition.
inline int64_t LaneTwoLevels(const TreeNode* nodes, int64_t node, double* mass) {
  const TreeNode* grandchildren = &nodes[4 * node];
  const __m128d lefts = _mm_loadh_pd(_mm_load_sd(&grandchildren[0].sum), &grandchildren[2].sum);
  const __m128d rights = _mm_loadh_pd(_mm_load_sd(&grandchildren[1].sum), &grandchildren[3].sum);
  const __m128d children = _mm_add_pd(lefts, rights);  // {left child's sum, right child's sum}
  __m128d remaining = _mm_load_sd(mass);
  const __m128d first = DescendsRightMask(children, _mm_unpackhi_pd(children, children), remaining);
  remaining = _mm_sub_sd(remaining, _mm_and_pd(first, children));
  // The chosen child's two children: the high lanes when the first step went right.
  const __m128d both = _mm_unpacklo_pd(first, first);
  const __m128d left = _mm_or_pd(_mm_and_pd(both, _mm_unpackhi_pd(lefts, lefts)), _mm_andnot_pd(both, lefts));
  const __m128d right = _mm_or_pd(_mm_and_pd(both, _mm_unpackhi_pd(rights, rights)), _mm_andnot_pd(both, rights));
  const __m128d second = DescendsRightMask(left, right, remaining);
  _mm_store_sd(mass, _mm_sub_sd(remaining, _mm_and_pd(second, left)));
  return 4 * node + 2 * (_mm_movemask_pd(first) & 1) + (_mm_movemask_pd(second) & 1);
}

#else

inline int64_t LaneStep(const TreeNode* nodes, int64_t node, double* mass) { return DescendStep(nodes, node, mass); }
inline int64_t LaneTwoLevels(const TreeNode* nodes, int64_t node, double* mass) {
  return DescendTwoLevels(nodes, node, mass);
}

#endif

}  // namespace perserve::tree
