#include "replay/step_replay.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace perserve::replay {

int64_t StepSlack(const Schema& step_schema, int64_t step_capacity) {
  const int64_t bytes = std::max<int64_t>(1, step_schema.ItemBytes());
  return std::min(step_capacity, std::clamp<int64_t>((int64_t{32} << 20) / bytes, 256, int64_t{1} << 16));
}

bool AppendRequest::IsAdd() const {
  return !items.empty() && std::all_of(items.begin(), items.end(), [](const TableItems& t) { return t.item_per_step; });
}

Status StepReplay::Create(const StepOptions& options, const ReplayOptions& items, Schema step_schema,
                          std::unique_ptr<StepReplay>* out) {
  std::vector<TableConfig> tables(1);
  tables[0].layout = options;
  tables[0].items = items;
  return Create(std::move(tables), std::move(step_schema), out);
}

Status StepReplay::Create(std::vector<TableConfig> tables, Schema step_schema, std::unique_ptr<StepReplay>* out) {
  if (tables.empty()) return Status::InvalidArgument("a replay needs at least one table");
  const StepOptions& ring = tables.front().layout;
  std::vector<StepLayout> layouts(tables.size());
  int reward_column = -1, done_column = -1;
  for (size_t i = 0; i < tables.size(); ++i) {
    TableConfig& config = tables[i];
    const auto refuse = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("table {}: {}", config.name, why));
    };
    if (config.name.empty()) return Status::InvalidArgument(fmt::format("table {} has no name", i));
    for (size_t j = 0; j < i; ++j) {
      if (tables[j].name == config.name) return refuse("two tables have this name");
    }
    StepOptions& layout = config.layout;
    if (layout.step_capacity != ring.step_capacity || layout.streams != ring.streams ||
        layout.prefault != ring.prefault) {
      return refuse(fmt::format("its ring options (capacity {}, streams {}) differ from the first table's ({}, {}): "
                                "the tables share one ring",
                                layout.step_capacity, layout.streams, ring.step_capacity, ring.streams));
    }
    const Status built = BuildStepLayout(layout, step_schema, &layouts[i]);
    if (!built.ok()) return refuse(built.message());
    if (layouts[i].done_column >= 0) {
      // Every table with episodes reads them from the same columns: the ring keeps one episode per stream.
      if (done_column >= 0 && (layouts[i].done_column != done_column || layouts[i].reward_column != reward_column)) {
        return refuse(fmt::format("its reward and done columns ({}, {}) differ from another table's: the tables "
                                  "share the ring's episodes",
                                  layout.reward_column, layout.done_column));
      }
      reward_column = layouts[i].reward_column;
      done_column = layouts[i].done_column;
    }
  }
  std::unique_ptr<StepReplay> replay(new StepReplay(ring, std::move(step_schema), reward_column, done_column));
  for (size_t i = 0; i < tables.size(); ++i) {
    std::unique_ptr<Replay> items;
    const Status created = Replay::Create(tables[i].items, layouts[i].stored_schema, &items);
    if (!created.ok()) {
      return Status::FromCode(static_cast<int>(created.code()),
                              fmt::format("table {}: {}", tables[i].name, created.message()));
    }
    replay->tables_.emplace_back(new ItemTable(std::move(tables[i].name), tables[i].layout, std::move(layouts[i]),
                                               std::move(items), &replay->steps_));
  }
  if (replay->tables_.size() > 1) {
    for (const auto& table : replay->tables_) table->label_ = fmt::format("table {}: ", table->name());
  }
  *out = std::move(replay);
  return Status::Ok();
}

StepReplay::StepReplay(const StepOptions& options, Schema step_schema, int reward_column, int done_column)
    : options_(options),
      steps_(step_schema, options.step_capacity, StepSlack(step_schema, options.step_capacity), options.streams,
             reward_column, done_column, options.prefault) {}

int StepReplay::TableIndex(std::string_view name) const {
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i]->name() == name) return static_cast<int>(i);
  }
  return -1;
}

void StepReplay::SetAssemblyThreads(int threads) {
  pool_ = threads > 1 ? std::make_unique<AssemblyPool>(threads) : nullptr;
  for (const auto& table : tables_) table->pool_ = pool_.get();
}

Status StepReplay::CheckSteps(int64_t steps, int64_t items) const {
  if (steps < 0 || steps > options_.step_capacity) {
    return Status::InvalidArgument(
        fmt::format("an append of {} steps: the count must be in [0, step capacity {}]", steps,
                    options_.step_capacity));
  }
  if (steps == 0 && items == 0) return Status::InvalidArgument("an append of no steps and no items");
  return Status::Ok();
}

Status StepReplay::CheckTable(int64_t table) const {
  if (table >= 0 && table < tables()) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("table {} is outside [0, {}): this server's tables are {}", table, tables(), TableNames()));
}

Status StepReplay::CheckCounts(int64_t steps, int table, int64_t items, bool item_per_step) const {
  PERSERVE_RETURN_IF_ERROR(CheckTable(table));
  return tables_[static_cast<size_t>(table)]->CheckCount(steps, items, item_per_step);
}

std::string StepReplay::TableNames() const {
  std::string names;
  for (const auto& table : tables_) names += (names.empty() ? "" : ", ") + table->name();
  return names;
}

Status StepReplay::Prepare(const AppendRequest& request) {
  is_prepared_ = false;
  const int stream = request.stream;
  if (stream < 0 || stream >= steps_.streams()) {
    return Status::InvalidArgument(fmt::format("stream {} is outside [0, {})", stream, steps_.streams()));
  }
  const int64_t steps = request.steps.steps;
  const int64_t old_steps = steps_.stream_steps(stream);
  if (request.first_step != old_steps && !(request.first_step == AppendRequest::kAtEnd && request.IsAdd())) {
    return Status::FailedPrecondition(fmt::format(
        "stream {} sends steps from index {}, but its next step is {}: a request was lost or repeated", stream,
        request.first_step, old_steps));
  }
  int64_t items = 0;
  for (size_t i = 0; i < request.items.size(); ++i) {
    const TableItems& group = request.items[i];
    PERSERVE_RETURN_IF_ERROR(CheckCounts(steps, group.table, group.count(steps), group.item_per_step));
    for (size_t j = 0; j < i; ++j) {
      if (request.items[j].table == group.table) {
        return Status::InvalidArgument(
            fmt::format("the request gives table {} items twice", tables_[static_cast<size_t>(group.table)]->name()));
      }
    }
    items += group.count(steps);
  }
  PERSERVE_RETURN_IF_ERROR(CheckSteps(steps, items));
  if (steps > 0) {
    PERSERVE_RETURN_IF_ERROR(steps_.CheckBatch(request.steps));
  } else if (!request.steps.bulk.empty()) {
    return Status::InvalidArgument(fmt::format("no steps but {} bytes of step columns", request.steps.bulk.size()));
  }

  // The request's steps' episodes, then every table's items against the steps as they will be.
  request_done_.resize(static_cast<size_t>(steps));
  request_episode_start_.resize(static_cast<size_t>(steps));
  int64_t episode_start = steps_.next_episode_start(stream);
  for (int64_t j = 0; j < steps; ++j) {
    request_episode_start_[j] = episode_start;
    request_done_[j] = steps_.Done(request.steps, j);
    if (request_done_[j] != 0) episode_start = old_steps + j + 1;
  }
  const StreamView view{steps_,
                        stream,
                        steps_.stream_oldest(stream),
                        old_steps,
                        old_steps + steps,
                        steps_.next_key(),
                        steps_.OldestKeyAfter(steps),
                        request_done_,
                        request_episode_start_};
  for (const TableItems& group : request.items) {
    PERSERVE_RETURN_IF_ERROR(tables_[static_cast<size_t>(group.table)]->PrepareItems(view, group, steps));
  }
  // The tables given no items lose those the steps push out.
  unasked_.clear();
  for (int t = 0; t < tables(); ++t) {
    const bool asked = std::any_of(request.items.begin(), request.items.end(),
                                   [t](const TableItems& group) { return group.table == t; });
    if (asked) continue;
    unasked_.push_back(t);
    tables_[static_cast<size_t>(t)]->PrepareEvictions(steps);
  }
  prepared_ = request;
  is_prepared_ = true;
  return Status::Ok();
}

Status StepReplay::Commit(uint64_t* first_item_key) {
  assert(is_prepared_);
  is_prepared_ = false;
  const AppendRequest& request = prepared_;
  for (const auto& table : tables_) table->UnlinkLeaving();
  if (request.steps.steps > 0) {
    for (const auto& table : tables_) table->ClearStepSlots(steps_.next_key(), request.steps.steps);
    steps_.Commit(request.stream, request.steps);
  }
  Status status;
  first_item_keys_.assign(request.items.size(), 0);
  for (size_t i = 0; i < request.items.size(); ++i) {
    const TableItems& group = request.items[i];
    const Status committed =
        tables_[static_cast<size_t>(group.table)]->CommitItems(group, request.stream, &first_item_keys_[i]);
    if (status.ok()) status = committed;
  }
  for (const int t : unasked_) {
    uint64_t unused = 0;
    const Status committed = tables_[static_cast<size_t>(t)]->CommitItems(TableItems{t}, request.stream, &unused);
    if (status.ok()) status = committed;
  }
  *first_item_key = first_item_keys_.empty() ? table(0).items().next_key() : first_item_keys_.front();
  return status;
}

Status StepReplay::Append(const AppendRequest& request, uint64_t* first_item_key) {
  PERSERVE_RETURN_IF_ERROR(Prepare(request));
  return Commit(first_item_key);
}

Status StepReplay::StartRestore(uint64_t first_step_key, std::span<const int64_t> first_index,
                                std::span<const int64_t> episode_start) {
  if (steps_.next_key() != 0) {
    return Status::FailedPrecondition(
        fmt::format("a restore into a step replay that holds {} steps already", steps_.next_key()));
  }
  steps_.StartRestore(first_step_key, first_index, episode_start);
  options_.streams = std::max(options_.streams, steps_.streams());
  for (const auto& table : tables_) table->options_.streams = options_.streams;
  return Status::Ok();
}

Status StepReplay::RestoreSteps(int stream, int64_t steps, std::span<const std::byte> step_columns) {
  const store::StepBatch batch{steps, step_columns, false};
  PERSERVE_RETURN_IF_ERROR(steps_.CheckBatch(batch));
  steps_.Commit(stream, batch);
  return Status::Ok();
}

Status StepReplay::RestoreItems(int* failed_table) {
  for (int t = 0; t < tables(); ++t) {
    const Status linked = tables_[static_cast<size_t>(t)]->LinkRestored();
    if (linked.ok()) continue;
    if (failed_table != nullptr) *failed_table = t;
    return linked;
  }
  return Status::Ok();
}

}  // namespace perserve::replay
