// The simulation's checks of a completed checkpoint (simulator.h): it
// restores (LoadCheckpoint, its shard's) to rows that are the items added
// under their keys with positive leaves, and one begun between two steps to
// exactly the replay as it was then (its Snapshot). With step streams the
// restore also rebuilds the step ring (LoadCheckpoint into a fresh
// StepReplay): every restored live item must assemble bit for bit as the
// StepModel's reference says, and one begun between two steps must restore
// the ring's held steps (their columns, stream, index and episode start) too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/simulator.h"
#include "server/service/simulation/step_model.h"

namespace perserve::service::simulation {

// What a replay holds, as a checkpoint keeps it: a checkpoint begun between
// two steps must restore the replay's snapshot then.
struct Snapshot {
  std::string path;  // the checkpoint's
  uint64_t oldest_key = 0, next_key = 0;
  std::vector<std::byte> rows;  // every held item, oldest key first, column after column
  std::vector<double> leaves;
  // With step streams: every held step, oldest key first: its columns, then
  // its stream, index and episode start.
  uint64_t oldest_step = 0, next_step = 0;
  std::vector<std::byte> steps;
  std::vector<int64_t> step_info;
  bool operator==(const Snapshot&) const = default;
};

Snapshot TakeSnapshot(const replay::Replay& replay, const replay::StepReplay* steps, std::string path);

// Restores checkpoint `path` of shard `shard` into a fresh replay made with
// `options` (with step streams, `streams` of them) and checks it, telling
// `model` of every restored item, or with step streams checking each live one
// against `step_model` (counted in *counts); when *snapshot is that
// checkpoint's, the restore must equal it (then reset).
void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, const replay::ReplayOptions& options,
                             int streams, const std::string& path, ReferenceModel* model,
                             const StepModel* step_model, std::optional<Snapshot>* snapshot, StepCounts* counts);

}  // namespace perserve::service::simulation
