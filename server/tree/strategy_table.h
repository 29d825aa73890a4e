// StrategyTable: which update strategy is cheapest for a batch of k elements,
// measured on the running machine (the "auto" strategy's crossovers). Shared
// by the backends: each hands Measure() its candidate strategies and a way to
// run one update on a scratch tree of the same capacity (so a user's tree is
// never touched).
//
// Measuring sets every leaf of the scratch tree to a random value, as in a full
// replay buffer, then times each candidate at batch sizes 1, 2, 4, ... up to
// the capacity or 2^16 with random batches back to back, each candidate
// settled before it is timed and the median kept (strategy_table.cc says how
// long). A batch of k then takes the winner at the smallest measured size >= k
// (the largest measured size's winner beyond it). Tables are cached per
// backend and capacity for the life of the process, so only the first tree of
// a given size pays: about 0.65 s at 2^21 leaves on a 2-core machine's CPU.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tree/priority_tree.h"

namespace perserve::tree {

class StrategyTable {
 public:
  // Runs one whole update (synchronously: it has finished when this returns)
  // with the given concrete strategy on the backend's scratch tree.
  using RunUpdate = std::function<Status(UpdateStrategy strategy, std::span<const int64_t> indices,
                                         std::span<const double> values)>;

  // The table for `backend` ("cpu", "cuda") and `capacity` (a power of two),
  // measured with `measure` on first use in this process; nullptr if `measure`
  // could not measure (nothing is cached then, so a later call tries again).
  // Thread-safe.
  static const StrategyTable* Cached(std::string_view backend, int64_t capacity,
                                     const std::function<std::optional<StrategyTable>()>& measure);

  // Times `candidates` (in this order at each size: put the ones cheap at small
  // batches first, so an O(n) sweep can be ruled out without running).
  // Gives up (nullopt) at the first update that fails.
  static std::optional<StrategyTable> Measure(int64_t capacity, std::span<const UpdateStrategy> candidates,
                               const RunUpdate& run_update);

  UpdateStrategy Choose(int64_t k) const { return by_bucket_[Bucket(k)]; }

  // One line per measured size, e.g. "k=512: per_element 40.1us ... -> sparse".
  const std::string& Describe() const { return description_; }

 private:
  static constexpr int kBuckets = 64;
  // Bucket b holds batch sizes in (2^(b-1), 2^b].
  static int Bucket(int64_t k) { return k <= 1 ? 0 : std::bit_width(static_cast<uint64_t>(k - 1)); }

  std::array<UpdateStrategy, kBuckets> by_bucket_{};
  std::string description_;
};

}  // namespace perserve::tree
