// PriorityTree: a sum tree and its min twin over `capacity` leaves, batched.
//
// The tree behind prioritized replay: leaf i holds item i's sampling weight,
// every internal node holds the sum (and the min) of the leaves below it, so
// the total is one read, an update is O(log n) and a proportional draw is one
// root-to-leaf descent. Backends (cpu/, cuda/) implement this interface over the
// shared per-element algorithm in tree_algorithm.h and give bit-identical
// results for the same operations.
//
// Thread safety: none. One owner calls it (the replay layer serialises access).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "perserve/status.h"

namespace perserve::tree {

// How Update() recomputes internal nodes after writing the leaves. All give
// bit-identical trees; they differ only in cost.
enum class UpdateStrategy {
  kAuto,        // pick per batch size from crossovers measured on this machine
  kPerElement,  // leaf-to-root walk per element: O(k log n)
  kRebuild,     // every internal node, level by level: O(n + k)
  kSparse,      // level by level over the distinct parents of touched nodes: O(k log n), no conflicts
};

enum class Device { kAuto, kCpu, kCuda };

Status ParseUpdateStrategy(std::string_view name, UpdateStrategy* strategy);
std::string_view UpdateStrategyName(UpdateStrategy strategy);
Status ParseDevice(std::string_view name, Device* device);

class PriorityTree {
 public:
  static constexpr int64_t kDefaultCapacity = int64_t{1} << 21;
  // The largest capacity accepted (after rounding): 2^40 leaves.
  static constexpr int64_t kMaxCapacity = int64_t{1} << 40;

  // Creates a tree with `capacity` rounded up to a power of two, every leaf 0
  // (and never set). Device kCuda fails with kUnavailable where there is no
  // CUDA backend or device; kAuto falls back to the CPU.
  static Status Create(int64_t capacity, Device device, std::unique_ptr<PriorityTree>* tree);

  virtual ~PriorityTree() = default;

  // Leaf count after rounding up to a power of two.
  virtual int64_t capacity() const = 0;
  virtual std::string_view device_name() const = 0;

  virtual void SetStrategy(UpdateStrategy strategy) = 0;
  virtual UpdateStrategy strategy() const = 0;

  // Measures now whatever kAuto needs (otherwise measured on the first update
  // that uses it): a server calls this before serving, so no request waits
  // for the calibration (~0.65 s at 2^21 leaves on the CPU).
  virtual void PrepareAuto() {}
  // The crossovers kAuto uses, one line per measured batch size (measures
  // them first if needed).
  virtual std::string DescribeAutoTable() = 0;

  // Sets leaf indices[j] to values[j] for every j. Validates the whole batch
  // first: an index outside [0, capacity) or a value that is negative, NaN or
  // infinite fails with a status naming the first bad element, and the tree is
  // unchanged. Repeated indices: the last value wins. Sizes must match.
  virtual Status Update(std::span<const int64_t> indices, std::span<const double> values) = 0;

  // Update() with leaf indices[j] set to priorities[j]^alpha, computed where
  // the tree lives (std::pow on the CPU; CUDA's pow on the device, which CUDA
  // documents as within 2 ulp of the exact power). Validated like Update(),
  // plus alpha finite and >= 0 and no priority so large that its power
  // overflows (or comes within a hair of it); a rejected batch leaves the
  // tree unchanged. A power below the smallest normal double (one that
  // underflows, and 0 from a zero priority) is clamped up to it, 2^-1022
  // (kSmallestLeaf, tree_algorithm.h says why): a leaf set from a priority is
  // never 0.
  virtual Status UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                                    double alpha) = 0;

  // For each mass, the leaf the descent lands on (docs/design.md): the sampling
  // primitive. Masses must be finite and >= 0 (a mass at or past the total is
  // allowed and lands on the last non-empty leaf); the total must be > 0 unless
  // the batch is empty. Never returns an empty leaf. O(k log n).
  virtual Status FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const = 0;

  // Draws indices.size() leaves proportional to their values, stratified
  // (docs/design.md): mass_i = (i + u_i) * Total() / B with u_i in (0, 1] from a
  // generator keyed by (seed, counter), so a call is reproducible and each
  // counter value gives fresh draws. Writes each leaf and its value (for
  // importance weights). The total must be > 0 unless the batch is empty.
  // Backends use different generators (CUDA: curand's Philox4_32_10, one
  // kernel for masses, descents and values), so the draws differ between
  // backends; each follows the same distribution. O(B log n).
  virtual Status Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                        std::span<double> values) const = 0;

  // Leaf values for the given indices (0 for never-set leaves).
  virtual Status Get(std::span<const int64_t> indices, std::span<double> values) const = 0;

  // Leaf values first .. first + values.size() - 1 (a range inside the
  // capacity), for checkpoints. This default gathers them with Get.
  virtual Status ReadLeaves(int64_t first, std::span<double> values) const;

  // Sum of all leaves. O(1).
  virtual double Total() const = 0;
  // Min over the positive leaves (the drawable ones; a leaf set to 0 is an
  // empty slot and does not count); +inf when there is none. O(1).
  virtual double Min() const = 0;

  // Copies all 2 * capacity node sums and mins (slot 0 unused) for tests and
  // debugging. Sizes must be 2 * capacity.
  virtual Status ReadNodes(std::span<double> sums, std::span<double> mins) const = 0;
};

}  // namespace perserve::tree
