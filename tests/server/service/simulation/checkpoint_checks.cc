#include "server/service/simulation/checkpoint_checks.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

#include "server/service/simulation/self_checking_rows.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::simulation {

Snapshot TakeSnapshot(const replay::Replay& replay, const replay::StepReplay* steps, std::string path) {
  Snapshot snapshot{std::move(path), replay.oldest_key(), replay.next_key(), {}, {}, 0, 0, {}, {}};
  std::vector<int64_t> slots;
  for (uint64_t key = snapshot.oldest_key; key < snapshot.next_key; ++key) {
    slots.push_back(static_cast<int64_t>(key % static_cast<uint64_t>(replay.capacity())));
  }
  snapshot.rows.resize(slots.size() * static_cast<size_t>(replay.store().schema().ItemBytes()));
  snapshot.leaves.resize(slots.size());
  replay.store().Gather(slots, snapshot.rows);
  if (!replay.tree().Get(slots, snapshot.leaves).ok()) throw SimulationFailure("reading a tree's leaves");
  if (steps == nullptr) return snapshot;
  const store::StepStore& ring = steps->steps();
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

// Every restored live item assembles as the reference says (removed ones,
// leaf 0, may name steps long overwritten).
int64_t CheckRestoredItems(int shard, const Snapshot& held, const replay::Replay& items,
                           const replay::StepReplay& steps, const StepModel& step_model) {
  int64_t compared = 0;
  std::vector<std::byte> got(static_cast<size_t>(steps.SampleItemBytes()));
  for (size_t i = 0; i < held.leaves.size(); ++i) {
    if (held.leaves[i] == 0.0) continue;
    const uint64_t key = held.oldest_key + i;
    const int64_t slot = static_cast<int64_t>(key % static_cast<uint64_t>(items.capacity()));
    steps.Assemble(std::span<const int64_t>(&slot, 1), got);
    std::vector<std::byte> want;
    for (const auto& column : step_model.Expected(proto::ShardKey(shard, key))) {
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
                             int streams, const std::string& path, ReferenceModel* model,
                             const StepModel* step_model, std::optional<Snapshot>* snapshot, StepCounts* counts) {
  std::unique_ptr<replay::Replay> restored;
  std::unique_ptr<replay::StepReplay> steps;
  Status status = config.steps.on
                      ? CreateStepReplays(config.steps, streams, options, &restored, &steps)
                      : replay::Replay::Create(options, SelfCheckingSchema(config.pad_bytes), &restored);
  CheckpointState state;
  std::string loaded;
  if (status.ok()) status = LoadCheckpoint(path, shard, config.shards, restored.get(), &state, &loaded, steps.get());
  if (!status.ok()) throw SimulationFailure(fmt::format("restoring {}: {}", path, status.ToString()));
  const Snapshot held = TakeSnapshot(*restored, steps.get(), path);
  const int64_t count = config.steps.on ? 0 : static_cast<int64_t>(held.leaves.size());
  if (config.steps.on) counts->restored += CheckRestoredItems(shard, held, *restored, *steps, *step_model);
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
                      "restored, {} .. {} then, steps {} .. {} restored, {} .. {} then, or other rows, leaves or "
                      "steps)",
                      path, held.oldest_key, held.next_key, (*snapshot)->oldest_key, (*snapshot)->next_key,
                      held.oldest_step, held.next_step, (*snapshot)->oldest_step, (*snapshot)->next_step));
    }
    snapshot->reset();
    if (config.steps.on) ++counts->restored_exact;
  }
}

}  // namespace perserve::service::simulation
