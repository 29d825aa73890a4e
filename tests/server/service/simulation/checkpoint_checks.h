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
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint/file_system.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/simulator.h"
#include "server/service/simulation/step_model.h"

namespace perserve::service::simulation {

// What one table holds, as a checkpoint keeps it: every held item, oldest
// key first: its key, slot, stored row (column after column: its step's
// key, its item columns) and leaf; its selectors' state (every held item's
// priority and times sampled, the sampler's and remover's orders: empty
// for the default options).
struct TableSnapshot {
  uint64_t next_key = 0;
  std::vector<uint64_t> keys;
  std::vector<int64_t> slots;
  std::vector<std::byte> rows;
  std::vector<double> leaves;
  std::vector<uint64_t> selector_keys, sampler_order, remover_order;
  std::vector<double> priorities;
  std::vector<int64_t> times_sampled;
  bool operator==(const TableSnapshot&) const = default;
};

// What a shard's replay holds, as a checkpoint keeps it: a checkpoint begun
// between two steps must restore the snapshot then.
struct Snapshot {
  std::string path;  // the checkpoint's
  std::vector<TableSnapshot> tables;  // the default one first
  // Every held step, oldest key first: its columns, then its stream, index
  // and episode start.
  uint64_t oldest_step = 0, next_step = 0;
  std::vector<std::byte> steps;
  std::vector<int64_t> step_info;
  bool operator==(const Snapshot&) const = default;
};

Snapshot TakeSnapshot(const replay::StepReplay& table, std::string path);

// The transitions `replay` (shard `shard`'s, of transitions, restored from
// checkpoint `where`) holds: each held key (its shard's bits in it) and the
// item its self-checking row names. Fails on a torn row.
std::vector<std::pair<uint64_t, int64_t>> HeldTransitions(const SimulationConfig& config, int shard,
                                                          const replay::StepReplay& replay, const std::string& where);

// Restores checkpoint `path` of shard `shard` from `files` into a fresh
// replay made as the shard's (CreateShardReplay: `options` for its tables'
// items, `streams` streams) and checks it, telling `model` of every
// restored item of transitions, or with step streams checking each (of
// every table) against `step_model` (counted in *counts); when *snapshot is
// that checkpoint's, the restore must equal it (then reset).
void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, std::span<const replay::ReplayOptions> options,
                             int streams, const std::string& path, FileSystem* files, ReferenceModel* model,
                             const StepModel* step_model, std::optional<Snapshot>* snapshot, StepCounts* counts);

}  // namespace perserve::service::simulation
