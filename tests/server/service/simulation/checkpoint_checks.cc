#include "server/service/simulation/checkpoint_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "server/service/simulation/self_checking_rows.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::simulation {

Snapshot TakeSnapshot(const replay::StepReplay& table, std::string path) {
  const replay::Replay& items = table.items();
  Snapshot snapshot;
  snapshot.path = std::move(path);
  snapshot.next_key = items.next_key();
  std::vector<std::pair<uint64_t, int64_t>> held;  // key, slot
  for (int64_t slot = 0; slot < items.slots_used(); ++slot) {
    if (items.KeyAt(slot) != replay::Replay::kNoKey) held.emplace_back(items.KeyAt(slot), slot);
  }
  std::sort(held.begin(), held.end());
  for (const auto& [key, slot] : held) {
    snapshot.keys.push_back(key);
    snapshot.slots.push_back(slot);
  }
  snapshot.rows.resize(held.size() * static_cast<size_t>(items.store().schema().ItemBytes()));
  snapshot.leaves.resize(held.size());
  items.store().Gather(snapshot.slots, snapshot.rows);
  if (!items.tree().Get(snapshot.slots, snapshot.leaves).ok()) throw SimulationFailure("reading a tree's leaves");
  const store::StepStore& ring = table.steps();
  snapshot.oldest_step = ring.oldest_key();
  snapshot.next_step = ring.next_key();
  for (uint64_t key = snapshot.oldest_step; key < snapshot.next_step; ++key) {
    for (int c = 0; c < static_cast<int>(ring.schema().columns.size()); ++c) {
      const std::byte* row = ring.Row(c, key);
      snapshot.steps.insert(snapshot.steps.end(), row, row + ring.schema().columns[c].ItemBytes());
    }
    const store::StepInfo& info = ring.Info(key);
    snapshot.step_info.insert(snapshot.step_info.end(), {info.stream, info.index, info.episode_start});
  }
  return snapshot;
}

namespace {

// Every restored item is drawable and assembles as the item added under its
// key: transitions' the add's self-checking row (told to the model, which
// checks it against the acknowledgement), step streams' the reference's.
// Returns how many step items it compared.
int64_t CheckRestoredItems(const SimulationConfig& config, int shard, const Snapshot& held,
                           const replay::StepReplay& table, ReferenceModel* model, const StepModel* step_model) {
  int64_t compared = 0;
  std::vector<std::byte> got(static_cast<size_t>(table.SampleItemBytes()));
  for (size_t i = 0; i < held.keys.size(); ++i) {
    const uint64_t key = held.keys[i];
    if (!(held.leaves[i] > 0.0)) {
      throw SimulationFailure(fmt::format("{}: the restored item of key {} has leaf {}", held.path, key, held.leaves[i]));
    }
    table.Assemble(std::span<const int64_t>(&held.slots[i], 1), got);
    if (!config.steps.on) {
      int64_t id = 0;
      if (!ReadRow(got, 1, 0, config.pad_bytes, &id)) {
        throw SimulationFailure(fmt::format("{}: the restored row of key {} is torn", held.path, key));
      }
      model->ObservedItem(proto::ShardKey(shard, key), id, "a restore of " + held.path);
      continue;
    }
    std::vector<std::byte> want;
    for (const auto& column : step_model->Expected(proto::ShardKey(shard, key))) {
      want.insert(want.end(), column.begin(), column.end());
    }
    if (got != want) {
      throw SimulationFailure(
          fmt::format("{}: the restored item of key {} does not assemble as the reference's", held.path, key));
    }
    ++compared;
  }
  return compared;
}

}  // namespace

void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, const replay::ReplayOptions& options,
                             int streams, const std::string& path, FileSystem* files, ReferenceModel* model,
                             const StepModel* step_model, std::optional<Snapshot>* snapshot, StepCounts* counts) {
  std::unique_ptr<replay::StepReplay> restored;
  Status status = CreateShardReplay(config, streams, options, &restored);
  CheckpointState state;
  std::string loaded;
  if (status.ok()) status = LoadCheckpoint(path, shard, config.shards, restored.get(), &state, &loaded, files);
  if (!status.ok()) throw SimulationFailure(fmt::format("restoring {}: {}", path, status.ToString()));
  const Snapshot held = TakeSnapshot(*restored, path);
  counts->restored += CheckRestoredItems(config, shard, held, *restored, model, step_model);
  if (snapshot->has_value() && (*snapshot)->path == path) {
    if (!(held == **snapshot)) {
      const Snapshot& then = **snapshot;
      throw SimulationFailure(fmt::format(
          "{} does not restore the table as it was when it began ({} items of keys below {} restored, {} below {} "
          "then; steps {} .. {} restored, {} .. {} then; or other keys, slots, rows, leaves or steps)",
          path, held.keys.size(), held.next_key, then.keys.size(), then.next_key, held.oldest_step, held.next_step,
          then.oldest_step, then.next_step));
    }
    snapshot->reset();
    if (config.steps.on) ++counts->restored_exact;
  }
}

}  // namespace perserve::service::simulation
