// The simulation's checks of a completed checkpoint (simulator.h): it
// restores (LoadCheckpoint, its shard's, format 3) into a fresh StepReplay
// made as the shard's was, every restored item is drawable (a positive
// leaf) and assembles as the item added under its key (transitions: the
// self-checking row of the add; step streams: bit for bit the StepModel's
// reference), and one begun between two steps restores exactly the table
// as it was then (its Snapshot): the items' keys, slots, stored rows and
// leaves, and the ring's held steps (their columns, stream, index and
// episode start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint/file_system.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/simulator.h"
#include "server/service/simulation/step_model.h"

namespace perserve::service::simulation {

// What a table holds, as a checkpoint keeps it: a checkpoint begun between
// two steps must restore the table's snapshot then.
struct Snapshot {
  std::string path;  // the checkpoint's
  uint64_t next_key = 0;
  // Every held item, oldest key first: its key, slot, stored row (column
  // after column: its step's key, its item columns) and leaf.
  std::vector<uint64_t> keys;
  std::vector<int64_t> slots;
  std::vector<std::byte> rows;
  std::vector<double> leaves;
  // Every held step, oldest key first: its columns, then its stream, index
  // and episode start.
  uint64_t oldest_step = 0, next_step = 0;
  std::vector<std::byte> steps;
  std::vector<int64_t> step_info;
  bool operator==(const Snapshot&) const = default;
};

Snapshot TakeSnapshot(const replay::StepReplay& table, std::string path);

// Restores checkpoint `path` of shard `shard` from `files` into a fresh
// table made as the shard's (CreateShardReplay: `options` for its items,
// `streams` streams) and checks it, telling `model` of every restored item of
// transitions, or with step streams checking each against `step_model`
// (counted in *counts); when *snapshot is that checkpoint's, the restore
// must equal it (then reset).
void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, const replay::ReplayOptions& options,
                             int streams, const std::string& path, FileSystem* files, ReferenceModel* model,
                             const StepModel* step_model, std::optional<Snapshot>* snapshot, StepCounts* counts);

}  // namespace perserve::service::simulation
