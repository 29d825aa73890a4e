#include "tree/tree_validation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "tree/priority_tree.h"

namespace perserve::tree {
namespace {

Status CheckSizes(size_t inputs, size_t outputs, const char* input_name, const char* output_name) {
  if (inputs == outputs) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("{} has {} elements but {} has {}", input_name, inputs, output_name, outputs));
}

Status CheckIndices(std::span<const int64_t> indices, int64_t capacity) {
  for (size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] < 0 || indices[j] >= capacity) {
      return Status::OutOfRange(
          fmt::format("index {} at position {} is outside [0, {})", indices[j], j, capacity));
    }
  }
  return Status::Ok();
}

// Names what is wrong with a value that must be finite and >= 0, or "" if nothing.
const char* NonNegativeFiniteProblem(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return "infinite";
  if (value < 0.0) return "negative";
  return "";
}

Status CheckNonNegativeFinite(std::span<const double> values, const char* what) {
  for (size_t j = 0; j < values.size(); ++j) {
    const char* problem = NonNegativeFiniteProblem(values[j]);
    if (*problem != '\0') {
      return Status::InvalidArgument(fmt::format("{} {} at position {} is {}; {}s must be finite and >= 0",
                                                 what, values[j], j, problem, what));
    }
  }
  return Status::Ok();
}

// A descent needs somewhere to land: some leaf with a positive value.
Status CheckPositiveTotal(double total, const char* action) {
  if (total > 0.0) return Status::Ok();
  return Status::FailedPrecondition(
      fmt::format("cannot {}: the tree's total is 0 (no leaf has a positive value)", action));
}

}  // namespace

Status ValidateUpdateBatch(std::span<const int64_t> indices, std::span<const double> values,
                           int64_t capacity) {
  PERSERVE_RETURN_IF_ERROR(CheckSizes(indices.size(), values.size(), "indices", "values"));
  PERSERVE_RETURN_IF_ERROR(CheckIndices(indices, capacity));
  return CheckNonNegativeFinite(values, "value");
}

Status ValidateExponentBatch(std::span<const int64_t> indices, std::span<const double> priorities, double alpha,
                             int64_t capacity) {
  if (!std::isfinite(alpha) || !(alpha >= 0.0)) {
    return Status::InvalidArgument(fmt::format("alpha {} must be finite and >= 0", alpha));
  }
  PERSERVE_RETURN_IF_ERROR(CheckSizes(indices.size(), priorities.size(), "indices", "priorities"));
  PERSERVE_RETURN_IF_ERROR(CheckIndices(indices, capacity));
  PERSERVE_RETURN_IF_ERROR(CheckNonNegativeFinite(priorities, "priority"));
  if (alpha <= 1.0) return Status::Ok();  // p^alpha <= max(p, 1): finite
  // p^alpha overflows from about p = DBL_MAX^(1/alpha). The bound keeps a
  // relative margin of 1e-12 per unit of alpha below that: far more than the
  // rounding of pow on either backend, so a priority that passes has a finite
  // leaf on every backend, before the batch is sent anywhere.
  const double largest = std::pow(std::numeric_limits<double>::max(), 1.0 / alpha) * (1.0 - 1e-12);
  for (size_t j = 0; j < priorities.size(); ++j) {
    if (priorities[j] > largest) {
      return Status::InvalidArgument(fmt::format("priority {} at position {} overflows p^alpha (alpha {})",
                                                 priorities[j], j, alpha));
    }
  }
  return Status::Ok();
}

Status ValidateTotalStaysBounded(const PriorityTree& tree, std::span<const int64_t> indices,
                                 std::span<const double> values, double alpha) {
  if (indices.empty()) return Status::Ok();
  const double largest = *std::max_element(values.begin(), values.end());
  const double old_total = tree.Total();
  // Fast path: even if no leaf were replaced and every new leaf were the
  // largest, the total stays far below the limit (which also absorbs the
  // backends' pow rounding and the tree's order of additions).
  const double bound = old_total + static_cast<double>(indices.size()) * std::pow(largest, alpha);
  if (bound <= kMaxTreeTotal * 0.5) return Status::Ok();

  // Exact: the new total is the old one, less the leaves replaced, plus the
  // new leaves (the last of each repeated index), in long double (no overflow).
  std::unordered_map<int64_t, double> last;
  for (size_t j = 0; j < indices.size(); ++j) last[indices[j]] = values[j];
  std::vector<int64_t> touched;
  for (const auto& entry : last) touched.push_back(entry.first);
  std::vector<double> old_leaves(touched.size());
  PERSERVE_RETURN_IF_ERROR(tree.Get(touched, old_leaves));
  long double total = old_total;
  for (size_t j = 0; j < touched.size(); ++j) {
    total -= old_leaves[j];
    total += std::pow(static_cast<long double>(last[touched[j]]), static_cast<long double>(alpha));
  }
  if (total <= static_cast<long double>(kMaxTreeTotal) * (1.0L - 1e-9L)) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "the batch would raise the sum of priority^alpha to {:.6g}, past the largest total the tree keeps finite "
      "sampling masses for ({:.6g}); largest priority in the batch {:.6g}, alpha {}; nothing of it was applied",
      static_cast<double>(std::min(total, static_cast<long double>(std::numeric_limits<double>::max()))),
      kMaxTreeTotal, largest, alpha));
}

Status ValidateSampleBatch(std::span<const int64_t> indices_out, std::span<const double> values_out,
                           double total) {
  PERSERVE_RETURN_IF_ERROR(CheckSizes(indices_out.size(), values_out.size(), "output indices", "output values"));
  return indices_out.empty() ? Status::Ok() : CheckPositiveTotal(total, "sample");
}

Status ValidateDescentBatch(std::span<const double> masses, std::span<const int64_t> indices_out,
                            double total) {
  PERSERVE_RETURN_IF_ERROR(CheckSizes(masses.size(), indices_out.size(), "masses", "output indices"));
  if (masses.empty()) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(CheckNonNegativeFinite(masses, "mass"));
  return CheckPositiveTotal(total, "descend");
}

Status ValidateGetBatch(std::span<const int64_t> indices, std::span<const double> values_out,
                        int64_t capacity) {
  PERSERVE_RETURN_IF_ERROR(CheckSizes(indices.size(), values_out.size(), "indices", "output values"));
  return CheckIndices(indices, capacity);
}

Status ValidateNodeSpans(std::span<const double> sums, std::span<const double> mins, int64_t capacity) {
  const size_t slots = static_cast<size_t>(2 * capacity);
  if (sums.size() == slots && mins.size() == slots) return Status::Ok();
  return Status::InvalidArgument(fmt::format("ReadNodes needs two spans of 2 * capacity = {} elements, got {} and {}",
                                             slots, sums.size(), mins.size()));
}

}  // namespace perserve::tree
