// Batch validation shared by every tree backend, run on the host before any
// node is touched, so a rejected batch leaves the tree unchanged.
#pragma once

#include <cstdint>
#include <span>

#include "perserve/status.h"

namespace perserve::tree {

class PriorityTree;

// The largest total a tree accepts: 2^960 (about 1e289). Below it every
// stratified mass (i + u) * total of a batch of up to 2^63 draws, and every
// node sum, is finite; a priority sum past it (1e308 twice with alpha 1)
// would otherwise turn the total into inf and every draw and weight into
// garbage.
inline constexpr double kMaxTreeTotal = 0x1p960;

// Sizes equal, every index in [0, capacity), every value finite and >= 0.
Status ValidateUpdateBatch(std::span<const int64_t> indices, std::span<const double> values,
                           int64_t capacity);

// ValidateUpdateBatch with priorities, plus alpha finite and >= 0 and every
// priority^alpha safely finite.
Status ValidateExponentBatch(std::span<const int64_t> indices, std::span<const double> priorities, double alpha,
                             int64_t capacity);

// Refuses a validated batch after which the tree's total would pass
// kMaxTreeTotal: leaves indices[j] = values[j]^alpha (alpha 1: the values as
// they are; repeats: the last wins). Usually O(k) with one pow (an upper bound
// from the largest value); near the limit it reads the leaves being replaced
// (tree.Get) and sums exactly in long double.
Status ValidateTotalStaysBounded(const PriorityTree& tree, std::span<const int64_t> indices,
                                 std::span<const double> values, double alpha = 1.0);

// Sizes equal, and total > 0 unless empty.
Status ValidateSampleBatch(std::span<const int64_t> indices_out, std::span<const double> values_out,
                           double total);

// Sizes equal, every mass finite and >= 0, and total > 0 unless empty.
Status ValidateDescentBatch(std::span<const double> masses, std::span<const int64_t> indices_out,
                            double total);

// Sizes equal, every index in [0, capacity).
Status ValidateGetBatch(std::span<const int64_t> indices, std::span<const double> values_out,
                        int64_t capacity);

// ReadNodes' spans: both 2 * capacity long.
Status ValidateNodeSpans(std::span<const double> sums, std::span<const double> mins, int64_t capacity);

}  // namespace perserve::tree
