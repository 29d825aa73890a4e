#include "service/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <fmt/format.h>

#include "common/coverage_marks.h"
#include "service/checkpoint/checkpoint_layout.h"

namespace perserve::service {
namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

}  // namespace

namespace checkpoint_layout {

int64_t CheckpointNumber(const std::string& name) {
  constexpr std::string_view prefix = "checkpoint-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t number = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    number = number * 10 + (name[i] - '0');
  }
  return number;
}

std::string ColumnFile(size_t column) { return fmt::format("column-{}.bin", column); }

std::string TablePart(int table, std::string_view name) { return fmt::format("table-{}-{}", table, name); }

std::string NewestComplete(FileSystem& file_system, const std::string& shard_dir) {
  std::vector<std::string> names;
  (void)file_system.ListDirectory(shard_dir, &names);  // none (no such directory): none complete
  int64_t newest = -1;
  std::string path;
  for (const std::string& name : names) {
    const int64_t number = CheckpointNumber(name);
    const fs::path entry = fs::path(shard_dir) / name;
    if (number > newest && file_system.Exists((entry / kManifest).string())) {
      newest = number;
      path = entry.string();
    }
  }
  return path;
}

int64_t RowsPerSlice(const Schema& schema) {
  return std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, schema.ItemBytes()));
}

}  // namespace checkpoint_layout

void Hash64::Update(std::span<const std::byte> bytes) {
  size_t i = 0;
  while (carried_ > 0 && carried_ < 8 && i < bytes.size()) carry_[carried_++] = bytes[i++];
  if (carried_ == 8) {
    uint64_t word = 0;
    std::memcpy(&word, carry_, 8);
    hash_ = (hash_ ^ word) * kFnvPrime;
    carried_ = 0;
  }
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    hash_ = (hash_ ^ word) * kFnvPrime;
  }
  while (i < bytes.size()) carry_[carried_++] = bytes[i++];
}

uint64_t Hash64::Finish() const {
  uint64_t hash = hash_;
  for (size_t i = 0; i < carried_; ++i) hash = (hash ^ static_cast<uint64_t>(carry_[i])) * kFnvPrime;
  return hash;
}

std::string ShardDirectory(const std::string& dir, int shard, int shards) {
  return (fs::path(dir) / fmt::format("shard-{}-of-{}", shard, shards)).string();
}

CheckpointWriter::CheckpointWriter(std::string dir, int shard, int shards, std::vector<int64_t> item_capacities,
                                   FileSystem* file_system, ServiceClock clock)
    : file_system_(*file_system),
      shard_dir_(ShardDirectory(dir, shard, shards)),
      shard_(shard),
      shards_(shards),
      clock_(std::move(clock)),
      last_path_(NewestComplete(file_system_, shard_dir_)),
      tables_(item_capacities.size()) {
  for (size_t t = 0; t < tables_.size(); ++t) {
    const size_t slots = static_cast<size_t>(std::max<int64_t>(0, item_capacities[t]));
    tables_[t].keys.resize(slots);
    tables_[t].leaves.resize(slots);
    tables_[t].pending.resize(slots);
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (finishing_.valid()) finishing_.wait();
  if (phase_ != Phase::kIdle) Abandon();
}

template <class Write>
Status CheckpointWriter::Timed(Write&& write) {
  const auto start = clock_.Now();
  const Status status = write();
  longest_step_ = std::max(longest_step_, std::chrono::duration_cast<std::chrono::microseconds>(
                                              clock_.Now() - start));
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Begin(const replay::StepReplay& replay, CheckpointState state) {
  if (active()) return Status::FailedPrecondition("a checkpoint is being written already");
  began_ = clock_.Now();
  // A directory created here is durable only once its parent is synced: else
  // a crash could lose the shard directory, and a checkpoint with it. Up to
  // the root at most (the root is its own parent): a file system that
  // answers nothing, a dead disk's, must not keep this walking.
  std::vector<fs::path> created;
  for (fs::path dir = shard_dir_; !dir.empty() && dir != dir.parent_path() && !file_system_.Exists(dir.string());
       dir = dir.parent_path()) {
    created.push_back(dir);
  }
  PERSERVE_RETURN_IF_ERROR(file_system_.CreateDirectories(shard_dir_));
  for (const fs::path& dir : created) {
    const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
    PERSERVE_RETURN_IF_ERROR(file_system_.SyncDirectory(parent.string()));
  }
  int64_t number = 0;
  std::vector<std::string> names;
  (void)file_system_.ListDirectory(shard_dir_, &names);  // unreadable: the create below says why
  for (std::string name : names) {
    if (name.ends_with(kPartialSuffix)) {
      // A write cut short earlier: never complete.
      (void)file_system_.RemoveAll((fs::path(shard_dir_) / name).string());
      name.resize(name.size() - std::string_view(kPartialSuffix).size());
    }
    number = std::max(number, CheckpointNumber(name) + 1);
  }
  path_ = (fs::path(shard_dir_) / fmt::format("checkpoint-{:06}", number)).string();
  partial_ = path_ + kPartialSuffix;
  PERSERVE_RETURN_IF_ERROR(file_system_.CreateDirectory(partial_));
  phase_ = Phase::kItems;
  parts_.clear();
  parts_.emplace_back("state.bin");
  ring_parts_ = parts_.size();
  parts_.emplace_back(kStepStateFile);
  for (const std::string& name : StepRingWriter::RowPartNames(replay.step_schema())) parts_.emplace_back(name);
  tables_.resize(static_cast<size_t>(replay.tables()));
  for (int t = 0; t < replay.tables(); ++t) {
    tables_[static_cast<size_t>(t)].first_part = parts_.size();
    tables_[static_cast<size_t>(t)].columns = replay.table(t).items().store().schema().columns.size();
    parts_.emplace_back(TablePart(t, kItemSlotsFile));
    parts_.emplace_back(TablePart(t, kLeavesFile));
    for (size_t c = 0; c < replay.table(t).items().store().schema().columns.size(); ++c) {
      parts_.emplace_back(TablePart(t, ColumnFile(c)));
    }
    parts_.emplace_back(TablePart(t, kFreeSlotsFile));
    parts_.emplace_back(TablePart(t, kSelectorsFile));
  }
  for (Part& part : parts_) {
    const Status created_file = file_system_.NewWritableFile((fs::path(partial_) / part.name).string(), &part.file);
    if (!created_file.ok()) {
      Abandon();
      return created_file;
    }
  }
  // The small state, and each table's snapshot: which slot holds which key,
  // the leaves as they are now (priority updates change them, not the
  // rows), the free slots and the selectors.
  state.format = kCheckpointFormat;
  state.schema = replay.step_schema().ToString();
  state.capacity = replay.options().step_capacity;
  if (state.tables.empty()) state.tables.push_back(TableCheckpointState{{}, {}, 0, {}, state.limiter});
  state.tables.resize(static_cast<size_t>(replay.tables()));
  Status status = Status::Ok();
  table_cursor_ = 0;
  for (int t = 0; t < replay.tables() && status.ok(); ++t) {
    const replay::ItemTable& table = replay.table(t);
    TableCheckpointState& saved = state.tables[static_cast<size_t>(t)];
    saved.name = table.name();
    saved.flags = TableCheckpointFlags(table);
    saved.size = table.items().size();
    saved.replay = table.items().State();
    status = Snapshot(table.items(), &tables_[static_cast<size_t>(t)]);
  }
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(state);
  }
  const std::string encoded = bytes.str();
  if (status.ok()) status = Append(&parts_[0], std::as_bytes(std::span(encoded.data(), encoded.size())));
  if (status.ok()) {
    const std::string ring_state = ring_.Begin(replay);
    status = Append(&parts_[ring_parts_], std::as_bytes(std::span(ring_state.data(), ring_state.size())));
  }
  longest_step_ = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - began_);
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Snapshot(const replay::Replay& items, TableSnapshot* table) {
  table->slots = items.slots_used();
  table->cursor = 0;
  if (static_cast<int64_t>(table->keys.size()) < table->slots) {
    table->keys.resize(static_cast<size_t>(items.capacity()));
    table->leaves.resize(static_cast<size_t>(items.capacity()));
    table->pending.resize(static_cast<size_t>(items.capacity()));
  }
  for (int64_t slot = 0; slot < table->slots; ++slot) {
    table->keys[slot] = items.KeyAt(slot);
    table->pending[slot] = table->keys[slot] != replay::Replay::kNoKey ? 1 : 0;
  }
  table->free_slots.assign(1, table->slots);
  table->free_slots.insert(table->free_slots.end(), items.free_slots().begin(), items.free_slots().end());
  std::ostringstream selectors;
  {
    cereal::BinaryOutputArchive archive(selectors);
    archive(items.Selectors());
  }
  table->selectors = selectors.str();
  return items.tree().ReadLeaves(0, std::span(table->leaves).first(static_cast<size_t>(table->slots)));
}

Status CheckpointWriter::Append(Part* part, std::span<const std::byte> bytes) {
  part->hash.Update(bytes);
  part->bytes += static_cast<int64_t>(bytes.size());
  if (part->buffer.size() + bytes.size() <= static_cast<size_t>(kSliceBytes)) {
    part->buffer.insert(part->buffer.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  }
  PERSERVE_RETURN_IF_ERROR(Flush(part));
  return WriteAll(part->file.get(), bytes);
}

Status CheckpointWriter::Flush(Part* part) {
  PERSERVE_RETURN_IF_ERROR(WriteAll(part->file.get(), part->buffer));
  part->buffer.clear();
  return Status::Ok();
}

Status CheckpointWriter::WriteItem(const replay::Replay& items, TableSnapshot* table, int64_t slot) {
  table->pending[slot] = 0;
  const struct {
    uint64_t key;
    int64_t slot;
  } record{table->keys[slot], slot};
  static_assert(sizeof(record) == 16);
  const size_t first = table->first_part;
  PERSERVE_RETURN_IF_ERROR(Append(&parts_[first], std::as_bytes(std::span(&record, 1))));
  PERSERVE_RETURN_IF_ERROR(Append(&parts_[first + 1], std::as_bytes(std::span(&table->leaves[slot], 1))));
  for (size_t c = 0; c < items.store().schema().columns.size(); ++c) {
    PERSERVE_RETURN_IF_ERROR(Append(&parts_[first + 2 + c], items.store().Rows(static_cast<int>(c), slot, 1)));
  }
  return Status::Ok();
}

Status CheckpointWriter::WriteItems(const replay::StepReplay& replay, size_t t, int64_t until) {
  TableSnapshot& table = tables_[t];
  const replay::Replay& items = replay.table(static_cast<int>(t)).items();
  for (; table.cursor < until; ++table.cursor) {
    if (table.pending[table.cursor] != 0) PERSERVE_RETURN_IF_ERROR(WriteItem(items, &table, table.cursor));
  }
  return Status::Ok();
}

Status CheckpointWriter::WriteTableTail(size_t t) {
  TableSnapshot& table = tables_[t];
  // After the item-slots, leaves and column parts: the free slots, then the selectors.
  const size_t free_part = table.first_part + 2 + table.columns;
  PERSERVE_RETURN_IF_ERROR(Append(&parts_[free_part], std::as_bytes(std::span(table.free_slots))));
  return Append(&parts_[free_part + 1], std::as_bytes(std::span(table.selectors.data(), table.selectors.size())));
}

StepRingWriter::Sink CheckpointWriter::StepSink() {
  return [this](size_t part, std::span<const std::byte> bytes) { return Append(&parts_[ring_parts_ + 1 + part], bytes); };
}

Status CheckpointWriter::BeforeWrite(const replay::StepReplay& replay, int64_t steps) {
  if (phase_ != Phase::kItems && phase_ != Phase::kSteps) return Status::Ok();
  return Timed([&] {
    if (steps > 0 && !ring_.done()) PERSERVE_RETURN_IF_ERROR(ring_.BeforeWrite(replay.steps(), steps, StepSink()));
    return Status::Ok();
  });
}

Status CheckpointWriter::BeforeCommit(const replay::StepReplay& replay, int64_t steps) {
  if (phase_ != Phase::kItems && phase_ != Phase::kSteps) return Status::Ok();
  return Timed([&] {
    if (steps > 0 && !ring_.done()) PERSERVE_RETURN_IF_ERROR(ring_.BeforeWrite(replay.steps(), steps, StepSink()));
    for (size_t t = 0; t < tables_.size(); ++t) {
      TableSnapshot& table = tables_[t];
      const replay::ItemTable& items = replay.table(static_cast<int>(t));
      for (const int64_t slot : items.planned_item_slots()) {
        if (slot < table.slots && table.pending[slot] != 0) {
          PERSERVE_MARK("checkpoint: an item's row written before an append overwrites it");
          PERSERVE_RETURN_IF_ERROR(WriteItem(items.items(), &table, slot));
        }
      }
    }
    return Status::Ok();
  });
}

Status CheckpointWriter::Step(const replay::StepReplay& replay, std::chrono::microseconds budget, bool* done) {
  *done = false;
  if (phase_ == Phase::kIdle) return Status::Ok();
  const auto start = clock_.Now();
  return Timed([&] {
    do {
      if (phase_ == Phase::kItems) {
        if (table_cursor_ == tables_.size()) {
          phase_ = Phase::kSteps;
          continue;
        }
        TableSnapshot& table = tables_[table_cursor_];
        const int64_t row_bytes = replay.table(static_cast<int>(table_cursor_)).items().store().schema().ItemBytes();
        const int64_t items_per_slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, row_bytes + 24));
        PERSERVE_RETURN_IF_ERROR(
            WriteItems(replay, table_cursor_, std::min(table.slots, table.cursor + items_per_slice)));
        if (table.cursor == table.slots) PERSERVE_RETURN_IF_ERROR(WriteTableTail(table_cursor_++));
      } else if (phase_ == Phase::kSteps) {
        PERSERVE_RETURN_IF_ERROR(ring_.WriteSlice(replay.steps(), StepSink()));
        if (ring_.done()) {
          for (Part& part : parts_) PERSERVE_RETURN_IF_ERROR(Flush(&part));
          phase_ = Phase::kFinishing;
          finishing_ = std::async(std::launch::async, [this] { return Finish(); });
        }
      } else if (finishing_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        PERSERVE_RETURN_IF_ERROR(finishing_.get());
        last_path_ = path_;
        last_duration_ =
            std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - began_);
        last_bytes_ = 0;
        for (const Part& part : parts_) last_bytes_ += part.bytes;
        parts_.clear();
        phase_ = Phase::kIdle;
        *done = true;
        break;
      } else {
        break;  // the helper thread still syncs
      }
    } while (clock_.Now() - start < budget);
    return Status::Ok();
  });
}

Status CheckpointWriter::Finish() {
  std::ostringstream manifest;
  manifest << "perserve-checkpoint " << kCheckpointFormat << "\n"
           << "shard " << shard_ << " of " << shards_ << "\n";
  for (Part& part : parts_) {
    PERSERVE_RETURN_IF_ERROR(part.file->Sync());
    part.file.reset();
    manifest << fmt::format("part {} {} {:016x}\n", part.name, part.bytes, part.hash.Finish());
  }
  manifest << "end\n";
  const std::string text = manifest.str();
  std::unique_ptr<WritableFile> file;
  PERSERVE_RETURN_IF_ERROR(file_system_.NewWritableFile((fs::path(partial_) / kManifest).string(), &file));
  PERSERVE_RETURN_IF_ERROR(WriteAll(file.get(), std::as_bytes(std::span(text.data(), text.size()))));
  PERSERVE_RETURN_IF_ERROR(file->Sync());
  file.reset();
  PERSERVE_RETURN_IF_ERROR(file_system_.SyncDirectory(partial_));
  PERSERVE_RETURN_IF_ERROR(file_system_.Rename(partial_, path_));
  const Status renamed = file_system_.SyncDirectory(shard_dir_);
  if (!renamed.ok()) {
    // Not known durable, so not complete: it goes as a partial would (else a
    // restore took the checkpoint its requester was told had failed).
    (void)file_system_.RemoveAll(path_);
    return renamed;
  }
  // The new one is durable: the older ones go.
  std::vector<std::string> names;
  (void)file_system_.ListDirectory(shard_dir_, &names);
  for (const std::string& name : names) {
    const std::string entry = (fs::path(shard_dir_) / name).string();
    if (CheckpointNumber(name) >= 0 && entry != path_) (void)file_system_.RemoveAll(entry);
  }
  return Status::Ok();
}

void CheckpointWriter::Abandon() {
  if (finishing_.valid()) finishing_.wait();
  parts_.clear();  // closes the files
  if (!partial_.empty()) (void)file_system_.RemoveAll(partial_);
  phase_ = Phase::kIdle;
}

}  // namespace perserve::service
