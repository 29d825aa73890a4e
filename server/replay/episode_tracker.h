// EpisodeTracker: episode statistics from the intake stream. When the schema
// has a scalar reward column and a scalar done column, each client's batches
// are scanned (scan/EpisodicPrefixSum, ends_at: done marks an episode's last
// step) with that client's carried state, so episodes spanning many batches
// are summed exactly; completed episodes are tallied until TakeInterval().
// Does no I/O. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "perserve/schema.h"

namespace perserve::replay {

struct EpisodeSummary {
  int64_t episodes = 0;
  double mean_return = 0.0;
  double max_return = 0.0;
  double mean_length = 0.0;
};

// One stream's episode in progress, carried from batch to batch.
struct EpisodeCarry {
  double return_sum = 0.0;
  uint8_t return_done = 0;
  double length_sum = 0.0;
  uint8_t length_done = 0;
};

class EpisodeTracker {
 public:
  // Tracking is on only if `reward` and `done` name scalar columns of `schema`.
  // With `bootstrap_steps` (step streams, docs/steps.md), a done of 2 marks a
  // truncated episode's bootstrap step: it ends the episode, but its reward
  // and the step itself are not counted in the episode's return and length.
  EpisodeTracker(const Schema& schema, std::string_view reward, std::string_view done, int streams,
                 bool bootstrap_steps = false);

  bool enabled() const { return reward_column_ >= 0 && done_column_ >= 0; }

  // Scans one accepted intake batch of `stream` (bulk: the columns, column
  // after column, as an add request carries them). O(count).
  void Observe(int stream, int64_t count, std::span<const std::byte> columns);
  // The same for a batch written in place: its regions in the store, as
  // TransitionStore::Regions gives them (1 or 2 a column).
  void ObserveRegions(int stream, std::span<const std::span<std::byte>> regions);

  // Completed episodes since the last call, and resets the tally.
  EpisodeSummary TakeInterval();

  // Each stream's episode in progress (what a checkpoint keeps), and setting
  // them back (ignored unless there are as many streams).
  const std::vector<EpisodeCarry>& carries() const { return carries_; }
  void RestoreCarries(const std::vector<EpisodeCarry>& carries) {
    if (carries.size() == carries_.size()) carries_ = carries;
  }

 private:
  using Carry = EpisodeCarry;
  // Scans `count` items of `stream` from its reward and done columns.
  void Scan(int stream, int64_t count, const std::byte* reward_data, const std::byte* done_data);

  const Schema& schema_;
  int reward_column_ = -1;
  int done_column_ = -1;
  bool bootstrap_steps_ = false;
  std::vector<Carry> carries_;
  // The interval's tally.
  int64_t episodes_ = 0;
  double return_total_ = 0.0;
  double return_max_ = 0.0;
  double length_total_ = 0.0;
  // Scratch.
  std::vector<double> rewards_, ones_, returns_, lengths_;
  std::vector<uint8_t> dones_;
};

}  // namespace perserve::replay
