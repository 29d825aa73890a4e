// A table's part of a checkpoint (format 4, checkpoint.h): what state.bin
// keeps of each of a StepReplay's tables, the flags a restore must share
// with it, and the checks of both. The table's items, leaves, free slots
// and selectors are its own files (table-<t>-*.bin: checkpoint.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cereal/types/string.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>

#include "perserve/status.h"
#include "replay/item_table.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/rate_limiter.h"

namespace perserve::replay {

// table-<t>-selectors.bin.
template <class Archive>
void serialize(Archive& ar, SelectorState& state) {
  ar(state.keys, state.priorities, state.times_sampled, state.sampler_order, state.remover_order);
}

}  // namespace perserve::replay

namespace perserve::service {

// What state.bin keeps of one table. (Formats 1 to 3 kept table 0's alone,
// in CheckpointState's own fields; a restore of one gives this for it.)
struct TableCheckpointState {
  std::string name;
  // Its layout and options, as TableCheckpointFlags gives them.
  std::vector<std::pair<std::string, std::string>> flags;
  int64_t size = 0;  // items held
  replay::ReplayState replay;
  RateLimiterState limiter;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(name, flags, size, replay.next_key, replay.max_priority, replay.seed, replay.samples_drawn,
       replay.counters.items_added, replay.counters.items_sampled, replay.counters.priorities_updated,
       replay.counters.stale_updates_dropped, replay.counters.priorities_dropped, limiter.inserted, limiter.sampled,
       limiter.observed, limiter.lowest, limiter.highest);
  }
};

// What a restore must share with the checkpoint of a table, as (key,
// value), under --table's keys: kind (transition, n_step or sequence),
// n_step, discount, sequence_length, sequence_period, stack, item_column,
// max_items, sampler, remover, max_times_sampled, alpha. Doubles as their
// shortest round trip (equal text, equal bits).
std::vector<std::pair<std::string, std::string>> TableCheckpointFlags(const replay::ItemTable& table);

// The checkpoint's tables (format 4) against the server's: FailedPrecondition
// where their count, a name (in order) or a flag differs, naming the table
// and both values; InvalidArgument where a table's flags are not a list of
// TableCheckpointFlags' keys (damaged). Checked before anything of the checkpoint is
// restored.
Status CheckTables(const std::string& dir, std::span<const TableCheckpointState> tables,
                   const replay::StepReplay& steps);

// One table's values against their ranges: a size in [0, most_items], a next key at or above it and within a shard's key
// space, a max priority finite and > 0, counters >= 0 with items added no
// more than the keys issued, a rate limiter's counts >= 0 and its offsets
// none or a finite range. InvalidArgument "<file>: <label><field> ..."
// otherwise (`label`: "" or "table NAME's ").
Status ValidateTableState(const std::string& file, const std::string& label, const TableCheckpointState& table,
                          int64_t most_items);

}  // namespace perserve::service
