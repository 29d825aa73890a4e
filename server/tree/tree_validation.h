// Batch validation shared by every tree backend, run on the host before any
// node is touched, so a rejected batch leaves the tree unchanged.
#pragma once

#include <cstdint>
#include <span>

#include "perserve/status.h"

namespace perserve::tree {

// Sizes equal, every index in [0, capacity), every value finite and >= 0.
Status ValidateUpdateBatch(std::span<const int64_t> indices, std::span<const double> values,
                           int64_t capacity);

// ValidateUpdateBatch with priorities, plus alpha finite and >= 0 and every
// priority^alpha safely finite.
Status ValidateExponentBatch(std::span<const int64_t> indices, std::span<const double> priorities, double alpha,
                             int64_t capacity);

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
