// The episodic prefix sum's per-element algorithm, for host and device.
//
// C_t = x_t + b_t C_{t-1}, b_t in {0, 1} a reset mask, written as a select
// (C_t = reset_t ? x_t : x_t + C_{t-1}) rather than a multiply, so that no
// 0 * inf or sign-of-zero detail can make two paths disagree. As an
// associative scan over pairs (a, reset), "reset" meaning "does not depend on
// anything earlier": combining an earlier segment A with a later segment B
// gives (B.reset ? B.a : B.a + A.a, A.reset || B.reset) -- the issue's
// (a_B + b_B a_A, b_A b_B) with b = !reset.
#pragma once

#include <cstdint>

#include "tree/tree_algorithm.h"  // PERSERVE_HOST_DEVICE

namespace perserve::scan {

enum class Boundary : int {
  kEndsAt = 0,    // d_t = 1 ends a segment at t: the reset lands on t + 1
  kStartsAt = 1,  // d_t = 1 starts a segment at t: the reset lands on t
};

// Whether element t starts afresh, given its own done flag and the previous one.
PERSERVE_HOST_DEVICE inline bool ResetsAt(Boundary boundary, uint8_t done, uint8_t previous_done) {
  return boundary == Boundary::kEndsAt ? previous_done != 0 : done != 0;
}

// One step of the sequential recurrence.
template <typename T>
PERSERVE_HOST_DEVICE inline T ScanStep(T x, bool reset, T previous_sum) {
  return reset ? x : x + previous_sum;
}

template <typename T>
struct ScanPair {
  T a;
  bool reset;
};

// The associative operator: `earlier` then `later`.
template <typename T>
PERSERVE_HOST_DEVICE inline ScanPair<T> CombinePairs(const ScanPair<T>& earlier, const ScanPair<T>& later) {
  return ScanPair<T>{later.reset ? later.a : later.a + earlier.a, earlier.reset || later.reset};
}

}  // namespace perserve::scan
