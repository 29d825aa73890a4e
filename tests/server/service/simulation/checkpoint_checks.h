// The simulation's checks of a completed checkpoint (simulator.h): it
// restores (LoadCheckpoint, its shard's) to rows that are the items added
// under their keys with positive leaves, and one begun between two steps to
// exactly the replay as it was then (its Snapshot). Transitions only: step
// streams' checkpoints are not written yet (step_config.h, kStepCheckpoints).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/simulation_config.h"

namespace perserve::service::simulation {

// What a replay holds, as a checkpoint keeps it: a checkpoint begun between
// two steps must restore the replay's snapshot then.
struct Snapshot {
  std::string path;  // the checkpoint's
  uint64_t oldest_key = 0, next_key = 0;
  std::vector<std::byte> rows;  // every held item, oldest key first, column after column
  std::vector<double> leaves;
  bool operator==(const Snapshot&) const = default;
};

Snapshot TakeSnapshot(const replay::Replay& replay, std::string path);

// Restores checkpoint `path` of shard `shard` into a fresh replay made with
// `options` and checks it, telling `model` of every restored item; when
// *snapshot is that checkpoint's, the restore must equal it (then reset).
void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, const replay::ReplayOptions& options,
                             const std::string& path, ReferenceModel* model, std::optional<Snapshot>* snapshot);

}  // namespace perserve::service::simulation
