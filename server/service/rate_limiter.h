// RateLimiter: keeps the ratio of sampled items to inserted items near a
// target, with Reverb's SampleToInsertRatio semantics. Plain bookkeeping, no
// I/O; the service holds back the requests it refuses and asks again.
//
// With R = samples_per_insert, E = error_buffer and M = min_size_to_sample,
// inserts I and samples S counted in items, and diff = I * R - S:
//   - a sample of b items may go when the replay holds >= M items and
//     diff - b >= R * M - E (the learner is not ahead by more than E);
//   - an insert of n items may go while the replay holds < M items, or when
//     diff + n * R <= R * M + E (the actors are not ahead by more than E).
// So once the replay holds M items, diff stays in [R M - E, R M + E], up to
// one request's worth: the measured samples per insert stays within E items
// of R. R = 0 disables it (everything may go; only M applies to samples).
//
// Both kinds can be held at once only if 2 E < n R + b (one insert and one
// sample do not fit in the buffer): the service then lets the oldest insert
// through and says so, rather than hang (docs/operations.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "perserve/status.h"

namespace perserve::service {

struct RateLimiterOptions {
  double samples_per_insert = 0.0;  // R; 0: no limit
  double error_buffer = 0.0;        // E, in sampled items
  int64_t min_size_to_sample = 1;   // M
};

// What a checkpoint keeps of a RateLimiter.
struct RateLimiterState {
  int64_t inserted = 0;
  int64_t sampled = 0;
  bool observed = false;
  double lowest = 0.0;
  double highest = 0.0;
};

class RateLimiter {
 public:
  // R and E finite and >= 0, M >= 1.
  static Status Validate(const RateLimiterOptions& options);
  explicit RateLimiter(RateLimiterOptions options) : options_(options) {}

  bool enabled() const { return options_.samples_per_insert > 0.0; }
  const RateLimiterOptions& options() const { return options_; }

  // `size`: items the replay holds now.
  bool CanSample(int64_t items, int64_t size) const;
  bool CanInsert(int64_t items, int64_t size) const;
  void Inserted(int64_t items, int64_t size_after);
  void Sampled(int64_t items);

  // I * R - S, and its offset from the target R * M.
  double diff() const {
    return static_cast<double>(inserted_) * options_.samples_per_insert - static_cast<double>(sampled_);
  }
  double offset() const { return diff() - options_.samples_per_insert * options_.min_size_to_sample; }
  // The extremes of offset() since the replay first held M items (0, 0 before).
  double lowest_offset() const { return observed_ ? lowest_ : 0.0; }
  double highest_offset() const { return observed_ ? highest_ : 0.0; }
  // "samples per insert 4 +- 200 items: offset now -12, seen [-180, 196]".
  std::string Describe() const;

  RateLimiterState State() const { return {inserted_, sampled_, observed_, lowest_, highest_}; }
  void Restore(const RateLimiterState& state) {
    inserted_ = state.inserted;
    sampled_ = state.sampled;
    observed_ = state.observed;
    lowest_ = state.lowest;
    highest_ = state.highest;
  }

 private:
  void Observe();

  RateLimiterOptions options_;
  int64_t inserted_ = 0;
  int64_t sampled_ = 0;
  bool observed_ = false;  // the replay has held M items
  double lowest_ = std::numeric_limits<double>::infinity();
  double highest_ = -std::numeric_limits<double>::infinity();
};

}  // namespace perserve::service
