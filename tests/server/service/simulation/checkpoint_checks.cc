#include "server/service/simulation/checkpoint_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "server/service/simulation/self_checking_rows.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::simulation {

namespace {

TableSnapshot TakeTableSnapshot(const replay::Replay& items) {
  TableSnapshot snapshot;
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
  replay::SelectorState selectors = items.Selectors();
  snapshot.selector_keys = std::move(selectors.keys);
  snapshot.priorities = std::move(selectors.priorities);
  snapshot.times_sampled = std::move(selectors.times_sampled);
  snapshot.sampler_order = std::move(selectors.sampler_order);
  snapshot.remover_order = std::move(selectors.remover_order);
  return snapshot;
}

}  // namespace

Snapshot TakeSnapshot(const replay::StepReplay& table, std::string path) {
  Snapshot snapshot;
  snapshot.path = std::move(path);
  for (int t = 0; t < table.tables(); ++t) snapshot.tables.push_back(TakeTableSnapshot(table.table(t).items()));
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

// The item a restored transition's self-checking row names (`where`: the
// restore, for the failure); fails on a torn row.
int64_t RestoredItem(const SimulationConfig& config, std::span<const std::byte> row, uint64_t key,
                     const std::string& where) {
  int64_t id = 0;
  if (!ReadRow(row, 1, 0, config.pad_bytes, &id)) {
    throw SimulationFailure(fmt::format("{}: the restored row of key {} is torn", where, key));
  }
  return id;
}

// Every restored item is drawable and assembles as the item added under its
// key: transitions' the add's self-checking row (told to the model, which
// checks it against the acknowledgement), step streams' the reference's.
// Returns how many step items it compared.
int64_t CheckRestoredItems(const SimulationConfig& config, int shard, const Snapshot& snapshot, int t,
                           const replay::StepReplay& replay, ReferenceModel* model, const StepModel* step_model) {
  int64_t compared = 0;
  const TableSnapshot& held = snapshot.tables[static_cast<size_t>(t)];
  const replay::ItemTable& table = replay.table(t);
  std::vector<std::byte> got(static_cast<size_t>(table.SampleItemBytes()));
  for (size_t i = 0; i < held.keys.size(); ++i) {
    const uint64_t key = held.keys[i];
    if (!(held.leaves[i] > 0.0)) {
      throw SimulationFailure(fmt::format("{}: the restored item of key {} (table {}) has leaf {}", snapshot.path, key,
                                          t, held.leaves[i]));
    }
    table.Assemble(std::span<const int64_t>(&held.slots[i], 1), got);
    if (!config.steps.on) {
      model->ObservedItem(proto::ShardKey(shard, key), RestoredItem(config, got, key, snapshot.path),
                          "a restore of " + snapshot.path);
      continue;
    }
    std::vector<std::byte> want;
    for (const auto& column : step_model->Expected(proto::ShardKey(shard, key), t)) {
      want.insert(want.end(), column.begin(), column.end());
    }
    if (got != want) {
      throw SimulationFailure(fmt::format("{}: the restored item of key {} (table {}) does not assemble as the "
                                          "reference's",
                                          snapshot.path, key, t));
    }
    ++compared;
  }
  return compared;
}

}  // namespace

std::vector<std::pair<uint64_t, int64_t>> HeldTransitions(const SimulationConfig& config, int shard,
                                                          const replay::StepReplay& replay, const std::string& where) {
  std::vector<std::pair<uint64_t, int64_t>> held;
  const replay::ItemTable& table = replay.table(0);
  const replay::Replay& items = table.items();
  std::vector<std::byte> row(static_cast<size_t>(table.SampleItemBytes()));
  for (int64_t slot = 0; slot < items.slots_used(); ++slot) {
    const uint64_t key = items.KeyAt(slot);
    if (key == replay::Replay::kNoKey) continue;
    table.Assemble(std::span<const int64_t>(&slot, 1), row);
    held.emplace_back(proto::ShardKey(shard, key), RestoredItem(config, row, key, where));
  }
  return held;
}

namespace {

// The checks' view of the simulation's files: they read, and change nothing
// a crash would keep or lose (a restore's fsync of the directory, which the
// service's own restore does, would make durable what the service had not,
// and would count as an operation a scheduled crash waits for).
class ReadOnlyFiles final : public FileSystem {
 public:
  explicit ReadOnlyFiles(FileSystem* files) : files_(*files) {}
  Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>*) override { return Refused(path); }
  Status NewSequentialFile(const std::string& path, std::unique_ptr<SequentialFile>* file) override {
    return files_.NewSequentialFile(path, file);
  }
  Status FileSize(const std::string& path, uint64_t* size) override { return files_.FileSize(path, size); }
  bool Exists(const std::string& path) override { return files_.Exists(path); }
  Status ListDirectory(const std::string& path, std::vector<std::string>* names) override {
    return files_.ListDirectory(path, names);
  }
  Status CreateDirectory(const std::string& path) override { return Refused(path); }
  Status CreateDirectories(const std::string& path) override { return Refused(path); }
  Status SyncDirectory(const std::string&) override { return Status::Ok(); }
  Status Rename(const std::string& from, const std::string&) override { return Refused(from); }
  Status RemoveAll(const std::string& path) override { return Refused(path); }

 private:
  static Status Refused(const std::string& path) {
    return Status::FailedPrecondition(fmt::format("the simulation's checks change no file ({})", path));
  }
  FileSystem& files_;
};

}  // namespace

void CheckRestoredCheckpoint(const SimulationConfig& config, int shard, std::span<const replay::ReplayOptions> options,
                             int streams, const std::string& path, FileSystem* files, ReferenceModel* model,
                             const StepModel* step_model, std::optional<Snapshot>* snapshot, StepCounts* counts) {
  std::unique_ptr<replay::StepReplay> restored;
  Status status = CreateShardReplay(config, streams, options, &restored);
  CheckpointState state;
  std::string loaded;
  ReadOnlyFiles read_only(files);
  if (status.ok()) status = LoadCheckpoint(path, shard, config.shards, restored.get(), &state, &loaded, &read_only);
  if (!status.ok()) throw SimulationFailure(fmt::format("restoring {}: {}", path, status.ToString()));
  const Snapshot held = TakeSnapshot(*restored, path);
  for (int t = 0; t < restored->tables(); ++t) {
    counts->restored += CheckRestoredItems(config, shard, held, t, *restored, model, step_model);
  }
  if (snapshot->has_value() && (*snapshot)->path == path) {
    if (!(held == **snapshot)) {
      const Snapshot& then = **snapshot;
      std::string tables;
      for (size_t t = 0; t < held.tables.size() && t < then.tables.size(); ++t) {
        const TableSnapshot &now = held.tables[t], &was = then.tables[t];
        tables += fmt::format("; table {}: {} items of keys below {} restored, {} below {} then{}", t, now.keys.size(),
                              now.next_key, was.keys.size(), was.next_key,
                              now == was ? "" : " (or other keys, slots, rows, leaves or selectors)");
      }
      throw SimulationFailure(
          fmt::format("{} does not restore the replay as it was when it began (steps {} .. {} restored, {} .. {} "
                      "then{})",
                      path, held.oldest_step, held.next_step, then.oldest_step, then.next_step, tables));
    }
    snapshot->reset();
    if (config.steps.on) ++counts->restored_exact;
  }
}

}  // namespace perserve::service::simulation
