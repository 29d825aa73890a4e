#include "server/service/simulation/checkpoint_checks.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

#include "server/service/simulation/self_checking_rows.h"
#include "service/checkpoint.h"

namespace perserve::service::simulation {

Snapshot TakeSnapshot(const replay::Replay& replay, std::string path) {
  Snapshot snapshot{std::move(path), replay.oldest_key(), replay.next_key(), {}, {}};
  std::vector<int64_t> slots;
  for (uint64_t key = snapshot.oldest_key; key < snapshot.next_key; ++key) {
    slots.push_back(static_cast<int64_t>(key % static_cast<uint64_t>(replay.capacity())));
  }
  snapshot.rows.resize(slots.size() * static_cast<size_t>(replay.store().schema().ItemBytes()));
  snapshot.leaves.resize(slots.size());
  replay.store().Gather(slots, snapshot.rows);
  if (!replay.tree().Get(slots, snapshot.leaves).ok()) throw SimulationFailure("reading a tree's leaves");
  return snapshot;
}

void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, const replay::ReplayOptions& options,
                             const std::string& path, ReferenceModel* model, std::optional<Snapshot>* snapshot) {
  std::unique_ptr<replay::Replay> restored;
  Status status = replay::Replay::Create(options, SelfCheckingSchema(config.pad_bytes), &restored);
  CheckpointState state;
  std::string loaded;
  if (status.ok()) status = LoadCheckpoint(path, shard, config.shards, restored.get(), &state, &loaded);
  if (!status.ok()) throw SimulationFailure(fmt::format("restoring {}: {}", path, status.ToString()));
  const Snapshot held = TakeSnapshot(*restored, path);
  const int64_t count = static_cast<int64_t>(held.leaves.size());
  for (int64_t i = 0; i < count; ++i) {
    int64_t id = 0;
    if (!ReadRow(held.rows, count, i, config.pad_bytes, &id)) {
      throw SimulationFailure(fmt::format("{}: the restored row of key {} is torn", path, held.oldest_key + i));
    }
    model->ObservedItem(proto::ShardKey(shard, held.oldest_key + static_cast<uint64_t>(i)), id, "a restore of " + path);
    if (!(held.leaves[i] > 0.0)) throw SimulationFailure(fmt::format("{}: restored leaf {}", path, held.leaves[i]));
  }
  if (snapshot->has_value() && (*snapshot)->path == path) {
    if (!(held == **snapshot)) {
      throw SimulationFailure(
          fmt::format("{} does not restore the replay as it was when it began (keys {} .. {} "
                      "restored, {} .. {} then, or other rows or leaves)",
                      path, held.oldest_key, held.next_key, (*snapshot)->oldest_key, (*snapshot)->next_key));
    }
    snapshot->reset();
  }
}

}  // namespace perserve::service::simulation
