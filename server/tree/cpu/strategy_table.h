// StrategyTable: which update strategy is cheapest for a batch of k elements,
// measured on the running machine (the "auto" strategy's crossovers).
//
// Measuring times every concrete strategy on a scratch tree of the same
// capacity (so a user's tree is never touched), every leaf set to a random
// value as in a full replay buffer, at batch sizes 1, 2, 4, ... up to the
// capacity or 2^16, random batches back to back, each strategy settled before
// it is timed and the median kept (strategy_table.cc says how long). A batch
// of k then takes the winner at the smallest measured size >= k (the largest
// measured size's winner beyond it). Tables are cached per capacity for the
// life of the process, so only the first tree of a given size pays: about
// 0.65 s at 2^21 leaves on a 2-core machine.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <string>

#include "tree/priority_tree.h"

namespace perserve::tree {

class StrategyTable {
 public:
  // The table for trees of `capacity` leaves (a power of two), measured on
  // first use in this process. Thread-safe.
  static const StrategyTable& ForCapacity(int64_t capacity);

  UpdateStrategy Choose(int64_t k) const { return by_bucket_[Bucket(k)]; }

  // One line per measured size, e.g. "k=512: per_element 40.1us ... -> sparse".
  const std::string& Describe() const { return description_; }

 private:
  static constexpr int kBuckets = 64;
  // Bucket b holds batch sizes in (2^(b-1), 2^b].
  static int Bucket(int64_t k) { return k <= 1 ? 0 : std::bit_width(static_cast<uint64_t>(k - 1)); }
  static StrategyTable Measure(int64_t capacity);

  std::array<UpdateStrategy, kBuckets> by_bucket_{};
  std::string description_;
};

}  // namespace perserve::tree
