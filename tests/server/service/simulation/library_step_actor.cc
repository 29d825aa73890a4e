#include "server/service/simulation/library_step_actor.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "server/service/simulation/library_actor.h"
#include "server/service/simulation/step_model.h"

namespace perserve::service::simulation {
namespace {

using client_internal::TestAccess;

// One column's rows as a span each, over `bulk` (the wire layout of `rows`).
ColumnSpans SpansOf(const std::vector<std::byte>& bulk, const Schema& schema, int64_t rows) {
  ColumnSpans spans{rows, {}};
  size_t offset = 0;
  for (const Column& column : schema.columns) {
    const size_t bytes = static_cast<size_t>(rows * column.ItemBytes());
    spans.columns.push_back(std::span(bulk).subspan(offset, bytes));
    offset += bytes;
  }
  return spans;
}

}  // namespace

LibraryStepActor::LibraryStepActor(int client, LibraryWorld* world)
    : LibraryClient(client, world),
      stream_(world->config.steps, client, world->steps->History(client, world->config.ShardOfActor(client)),
              world->run) {
  options_.max_in_flight = config_.library_max_in_flight;
  // Appends of up to the ring's slack send their step columns apart (received straight into the ring) from this size.
  options_.columns_apart_min_bytes = config_.columns_apart_min_bytes;
  if (random_.Chance(0.3)) options_.add_timeout_seconds = random_.Chance(0.5) ? random_.Uniform(0.001, 0.1) : 3600.0;
  actor_ = TestAccess::Actor(std::move(owned_connection_), options_);
  Expect(actor_->stores_steps() && actor_->item_schema().columns.size() == config_.steps.options.item_columns.size(),
         [&] { return fmt::format("client {}: the library does not see a server of step streams", client_); });
}

void LibraryStepActor::Act() {
  const double u = random_.Uniform(0.0, 1.0);
  if (u < 0.003) {  // leaves early
    Finish();
    closed_early_ = true;
    return;
  }
  if (u < 0.08) return Flush();
  if (u < 0.14) return CallCanAdd(*actor_);
  Append(/*outside=*/u < 0.17);
}

void LibraryStepActor::Append(bool outside) {
  const StepStreamsConfig& steps = config_.steps;
  PortableRandom& rng = random_.generator();
  const int64_t before = actor_->steps_appended();
  stream_.Commit(before, {});
  const int64_t count = random_.Pick(0, steps.max_append);
  const StepRows rows = stream_.Draw(rng, count);
  stream_.Commit(before, rows);
  std::vector<int64_t> items = stream_.PickItems(rng, random_.Pick(count == 0 ? 1 : 0, 3));
  if (outside) items.push_back(before + count + random_.Pick(0, 2));
  if (count == 0 && items.empty()) return stream_.Commit(before, {});
  std::vector<double> priorities;
  if (random_.Chance(0.5)) {
    for (size_t i = 0; i < items.size(); ++i) priorities.push_back(random_.Uniform(0.01, 10.0));
  }
  const std::vector<std::byte> step_bulk = StepStream::Wire(rows, steps.step_schema.columns.size());
  const Schema item_schema{steps.options.item_columns};
  const std::vector<std::byte> item_bulk = StepStream::Wire(
      stream_.ItemRows(rng, static_cast<int64_t>(items.size())), item_schema.columns.size());
  const ColumnSpans step_spans = count == 0 ? ColumnSpans{} : SpansOf(step_bulk, steps.step_schema, count);
  const ColumnSpans item_spans =
      items.empty() ? ColumnSpans{} : SpansOf(item_bulk, item_schema, static_cast<int64_t>(items.size()));
  // With several tables, now and then items in the others too, in one request (by name, in a random order).
  std::vector<TableGroup> extra;
  for (int table = 1; table < config_.tables() && !outside; ++table) {
    if (!random_.Chance(0.5)) continue;
    TableGroup group = DrawTableGroup(random_, stream_, table, random_.Pick(1, 2));
    if (!group.steps.empty()) extra.push_back(std::move(group));
  }
  std::vector<NewItems> groups = {NewItems{items, priorities, item_spans}};
  for (const TableGroup& more : extra) {
    const SimTable& table = config_.steps.tables[static_cast<size_t>(more.table)];
    const Schema columns{table.layout.item_columns};
    groups.push_back(NewItems{more.steps, more.priorities,
                              columns.columns.empty()
                                  ? ColumnSpans{}
                                  : SpansOf(more.columns, columns, static_cast<int64_t>(more.steps.size())),
                              table.name});
  }
  if (groups.size() > 1 && random_.Chance(0.5)) std::reverse(groups.begin(), groups.end());
  doing_ = fmt::format("Append of {} steps from {}, {} items{}{}", count, before, items.size(),
                       outside ? " (one outside the stream)" : "",
                       extra.empty() ? "" : fmt::format(" and items in {} other tables", extra.size()));
  const int64_t frames = connection_->frames_sent();
  const Status status = extra.empty() ? actor_->Append(step_spans, NewItems{items, priorities, item_spans})
                                      : actor_->Append(step_spans, groups);
  Fingerprint(status);
  if (status.ok()) {
    Expect(!outside && connection_->frames_sent() > frames, [&] {
      return fmt::format("client {}: {} returned OK{}", client_, doing_,
                         outside ? "" : fmt::format(" and sent {} frames", connection_->frames_sent() - frames));
    });
    // After a refusal the library goes on from the steps the server acknowledged: so does the view.
    stream_.Commit(actor_->steps_appended() - count, rows);
    stream_.MarkItems(items);
    for (const TableGroup& more : extra) stream_.MarkItems(more.steps, more.table);
    return;
  }
  Expect(connection_->frames_sent() == frames,
         [&] { return fmt::format("client {}: {} returned {} but sent it", client_, doing_, status.ToString()); });
  stream_.Commit(actor_->steps_appended(), {});
  if (IsRejectionReport(status)) return ExpectRejectionReport(client_, status, "Append", *connection_, &reported_,
                                                              &world_.counts);
  // Its own refusal: an item outside the stream, or outside once a refused append took the stream back.
  Expect((outside || actor_->steps_appended() < before) && status.code() == Status::Code::kInvalidArgument,
         [&] { return fmt::format("client {}: {} returned {}", client_, doing_, status.ToString()); });
}

void LibraryStepActor::Flush() {
  doing_ = "Flush";
  const Status status = actor_->Flush();
  Fingerprint(status);
  ExpectRejectionReport(client_, status, "Flush", *connection_, &reported_, &world_.counts);
  CheckCounts("Flush");
}

void LibraryStepActor::Finish() {
  Flush();
  doing_ = "Close";
  const Status status = actor_->Close();
  Fingerprint(status);
  Expect(status.ok(),
         [&] { return fmt::format("client {}: Close after Flush returned {}", client_, status.ToString()); });
  CheckCounts("Close");
}

void LibraryStepActor::CheckCounts(const char* when) const { CheckActorCounts(*actor_, reported_, "appends", when); }

}  // namespace perserve::service::simulation
