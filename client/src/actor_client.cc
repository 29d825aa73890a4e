#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "client/src/connection.h"
#include "client/src/open_clients.h"
#include "perserve/client.h"
#include "proto/append.h"

namespace perserve {

using client_internal::Connection;
using client_internal::OpenClients;

Status ActorClient::Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<ActorClient>* actor) {
  if (options.max_in_flight < 1) return Status::InvalidArgument("max_in_flight must be >= 1");
  if (!std::isfinite(options.add_timeout_seconds) || options.add_timeout_seconds < 0.0) {
    return Status::InvalidArgument(
        fmt::format("add_timeout_seconds must be finite and >= 0 (0: none), not {}", options.add_timeout_seconds));
  }
  auto connection = std::make_unique<client_internal::MpiConnection>();
  PERSERVE_RETURN_IF_ERROR(connection->Join(comm, proto::Role::kActor));
  ActorClient* joined = new ActorClient(std::move(connection), options);
  actor->reset(joined);
  const Status registered = OpenClients::Register(joined, [joined] { joined->CloseAtFinalize(); });
  if (!registered.ok()) actor->reset();  // closes it with the server
  return registered;
}

ActorClient::ActorClient(std::unique_ptr<Connection> connection, ClientOptions options)
    : connection_(std::move(connection)),
      options_(options),
      steps_sent_(connection_->first_step()),
      steps_acknowledged_(steps_sent_) {}

ActorClient::~ActorClient() {
  OpenClients::CloseFromDestructor(this, "actor", [this] { return Close(); });
}

void ActorClient::CloseAtFinalize() { OpenClients::ReportClosedAtFinalize("actor", Close()); }

const Schema& ActorClient::schema() const { return connection_->schema(); }

Status ActorClient::Add(const BatchView& batch, std::span<const double> priorities, std::string_view table) {
  const Schema& schema = connection_->schema();
  if (batch.columns.size() != schema.columns.size()) {
    return Status::InvalidArgument(fmt::format("the batch has {} columns, the schema {} ({}); nothing was sent",
                                               batch.columns.size(), schema.columns.size(), schema.ToString()));
  }
  // The lengths the schema implies (CheckBatch then refuses only NULLs and
  // sizes out of range), computed only for sizes CheckBatch can accept.
  ColumnSpans spans{batch.size, {}};
  const bool representable = batch.size > 0 && batch.size <= (int64_t{1} << 31) / std::max<int64_t>(1, schema.ItemBytes());
  for (size_t i = 0; i < batch.columns.size(); ++i) {
    const size_t bytes = representable ? static_cast<size_t>(batch.size * schema.columns[i].ItemBytes()) : 0;
    spans.columns.emplace_back(static_cast<const std::byte*>(batch.columns[i]), batch.columns[i] ? bytes : 0);
  }
  return Add(spans, priorities, table);
}

Status ActorClient::Add(const ColumnSpans& batch, std::span<const double> priorities, std::string_view table) {
  return Send(batch, priorities, table, /*borrow=*/false);
}

Status ActorClient::AddBorrowed(const ColumnSpans& batch, std::span<const double> priorities, std::string_view table) {
  return Send(batch, priorities, table, /*borrow=*/true);
}

Status ActorClient::Send(const ColumnSpans& batch, std::span<const double> priorities, std::string_view table,
                         bool borrow) {
  if (closed_) return Status::FailedPrecondition("the actor is closed");
  int index = 0;
  PERSERVE_RETURN_IF_ERROR(connection_->TableIndex(table, &index));
  if (connection_->tables()[static_cast<size_t>(index)].steps) {
    if (table.empty()) {
      return Status::FailedPrecondition("this server's items are n-step transitions or sequences over steps "
                                        "(perserve-server --n-step or --sequence-length): append steps and create "
                                        "items over them with Append (docs/steps.md); nothing was sent");
    }
    return Status::FailedPrecondition(fmt::format("table \"{}\"'s items are n-step transitions or sequences over "
                                                  "steps: append steps and create items over them with Append "
                                                  "(docs/steps.md); nothing was sent",
                                                  table));
  }
  PERSERVE_RETURN_IF_ERROR(CheckBatch(connection_->schema(), batch, priorities));
  const std::vector<proto::ItemGroup> groups = {
      proto::ItemGroup{index, 0, /*item_per_step=*/true, /*has_priorities=*/!priorities.empty()}};
  const std::vector<proto::ItemGroupSpans> spans = {proto::ItemGroupSpans{{}, priorities, {}}};
  return SendAppend(batch, groups, spans, borrow);
}

bool ActorClient::stores_steps() const { return connection_->steps(); }

const Schema& ActorClient::item_schema() const { return connection_->item_schema(); }

const Schema& ActorClient::item_schema(std::string_view table) const {
  static const Schema none;
  int index = 0;
  if (!connection_->TableIndex(table, &index).ok()) return none;
  return connection_->tables()[static_cast<size_t>(index)].items;
}

std::vector<std::string> ActorClient::tables() const {
  std::vector<std::string> names;
  for (const proto::TableSchemas& table : connection_->tables()) names.push_back(table.name);
  return names;
}

Status ActorClient::Append(const ColumnSpans& steps, const NewItems& items) {
  return SendSteps(steps, std::span(&items, 1), /*borrow=*/false);
}

Status ActorClient::Append(const ColumnSpans& steps, std::span<const NewItems> items) {
  return SendSteps(steps, items, /*borrow=*/false);
}

Status ActorClient::AppendBorrowed(const ColumnSpans& steps, const NewItems& items) {
  return SendSteps(steps, std::span(&items, 1), /*borrow=*/true);
}

Status ActorClient::AppendBorrowed(const ColumnSpans& steps, std::span<const NewItems> items) {
  return SendSteps(steps, items, /*borrow=*/true);
}

namespace {

// One NewItems checked against its table's item columns (`table` its name,
// for errors; empty: the default table, said as before tables).
Status CheckNewItems(const NewItems& items, const Schema& item_schema, std::string_view table) {
  const int64_t item_count = static_cast<int64_t>(items.steps.size());
  const std::string in_table = table.empty() ? "" : fmt::format(" (table \"{}\")", table);
  if (!items.priorities.empty() && items.priorities.size() != items.steps.size()) {
    return Status::InvalidArgument(fmt::format("{} items{} with {} priorities: give one per item, or none (the "
                                               "server's max priority); nothing was sent",
                                               item_count, in_table, items.priorities.size()));
  }
  PERSERVE_RETURN_IF_ERROR(CheckPriorities(items.priorities));
  const bool no_item_columns = items.columns.columns.empty() ||
                               (item_count == 0 && std::all_of(items.columns.columns.begin(), items.columns.columns.end(),
                                                               [](std::span<const std::byte> c) { return c.empty(); }));
  if (item_schema.columns.empty()) {
    if (!no_item_columns) {
      return Status::InvalidArgument(
          fmt::format("the {} has no item columns (perserve-server --item-column), but the items carry columns; "
                      "nothing was sent",
                      table.empty() ? std::string("server") : fmt::format("table \"{}\"", table)));
    }
  } else if (item_count > 0 || !no_item_columns) {
    if (items.columns.size != item_count) {
      return Status::InvalidArgument(fmt::format("{} items{} with item columns of {} rows; nothing was sent",
                                                 item_count, in_table, items.columns.size));
    }
    PERSERVE_RETURN_IF_ERROR(CheckBatch(item_schema, items.columns, {}));
  }
  return Status::Ok();
}

}  // namespace

Status ActorClient::SendSteps(const ColumnSpans& steps, std::span<const NewItems> items, bool borrow) {
  if (closed_) return Status::FailedPrecondition("the actor is closed");
  // No steps: size 0, with no columns or only empty ones.
  const bool no_steps = steps.size == 0 && std::all_of(steps.columns.begin(), steps.columns.end(),
                                                       [](std::span<const std::byte> c) { return c.empty(); });
  if (!no_steps) PERSERVE_RETURN_IF_ERROR(CheckBatch(connection_->schema(), steps, {}));
  const int64_t count = no_steps ? 0 : steps.size;
  std::vector<proto::ItemGroup> groups;
  std::vector<proto::ItemGroupSpans> spans;
  std::vector<int> named;  // each NewItems' table, to refuse one named twice
  for (const NewItems& group : items) {
    int table = 0;
    PERSERVE_RETURN_IF_ERROR(connection_->TableIndex(group.table, &table));
    if (std::find(named.begin(), named.end(), table) != named.end()) {
      return Status::InvalidArgument(fmt::format("two NewItems name table \"{}\": give a table's items once; "
                                                 "nothing was sent",
                                                 connection_->tables()[static_cast<size_t>(table)].name));
    }
    named.push_back(table);
    const Schema& item_schema = connection_->tables()[static_cast<size_t>(table)].items;
    PERSERVE_RETURN_IF_ERROR(CheckNewItems(group, item_schema, group.table));
    if (group.steps.empty()) continue;  // nothing to create
    groups.push_back(proto::ItemGroup{table, static_cast<int64_t>(group.steps.size()), /*item_per_step=*/false,
                                      /*has_priorities=*/!group.priorities.empty()});
    spans.push_back(proto::ItemGroupSpans{group.steps, group.priorities, group.columns.columns});
  }
  if (count == 0 && groups.empty()) {
    return Status::InvalidArgument("an append of no steps and no items; nothing was sent");
  }
  const ColumnSpans no_columns{0, {}};
  return SendAppend(no_steps ? no_columns : steps, groups, spans, borrow);
}

Status ActorClient::SendAppend(const ColumnSpans& steps, const std::vector<proto::ItemGroup>& groups,
                               const std::vector<proto::ItemGroupSpans>& spans, bool borrow) {
  while (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  if (stream_rejected_) {
    // Every append sent after the refused one is refused too (its first step
    // is past the server's): once all are answered, the stream goes on from
    // the steps the server acknowledged.
    while (!in_flight_.empty()) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  }
  if (unreported_rejections_ > 0) return TakePendingError(/*instead_of_send=*/true);
  const int64_t count = steps.size;
  for (const proto::ItemGroupSpans& group : spans) {
    for (size_t i = 0; i < group.item_steps.size(); ++i) {
      if (group.item_steps[i] < 0 || group.item_steps[i] >= steps_sent_ + count) {
        return Status::InvalidArgument(fmt::format("item {}'s step {} is not in this actor's stream (its steps are 0 "
                                                   "to {} with this append's); nothing was sent",
                                                   i, group.item_steps[i], steps_sent_ + count - 1));
      }
    }
  }
  // An add: its items are its steps, at the stream's end (it stands alone).
  const bool add = !groups.empty() && std::all_of(groups.begin(), groups.end(),
                                                  [](const proto::ItemGroup& group) { return group.item_per_step; });
  size_t column_bytes = 0;
  for (const auto& column : steps.columns) column_bytes += column.size();
  // Large step columns go as a message of their own, received straight into
  // the server's ring (as many steps as it has free slots for).
  const bool apart = count > 0 && count <= connection_->max_steps_apart() && options_.columns_apart_min_bytes >= 0 &&
                     connection_->SendsColumnsApart() &&
                     column_bytes >= static_cast<size_t>(options_.columns_apart_min_bytes);
  const bool lent = apart && borrow;  // the columns go from the caller's memory, not copied
  proto::AppendMeta meta;
  meta.first_step = add ? proto::AppendMeta::kAtEnd : steps_sent_;
  meta.steps = count;
  meta.groups = groups;
  meta.columns_follow = apart;
  meta.timeout_seconds = options_.add_timeout_seconds;
  const uint64_t id = connection_->NextRequestId();
  size_t frame_bytes = 128 + 32 * groups.size() + (apart ? 0 : column_bytes);
  for (const proto::ItemGroupSpans& group : spans) {
    frame_bytes += group.item_steps.size_bytes() + group.priorities.size_bytes();
    for (const auto& column : group.item_columns) frame_bytes += column.size();
  }
  std::vector<std::byte> frame = connection_->AcquireBuffer(frame_bytes);
  const std::span<const std::span<const std::byte>> in_frame =
      apart ? std::span<const std::span<const std::byte>>{} : std::span<const std::span<const std::byte>>(steps.columns);
  proto::EncodeAppend(id, meta, in_frame, spans, &frame);
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  uint64_t columns_send = 0;
  if (lent) {
    PERSERVE_RETURN_IF_ERROR(connection_->SendColumnsFrom(steps.columns, &columns_send));
  } else if (apart) {
    std::vector<std::byte> columns = connection_->AcquireBuffer(column_bytes);
    columns.resize(column_bytes);
    std::byte* to = columns.data();
    for (const auto& column : steps.columns) {
      std::memcpy(to, column.data(), column.size());
      to += column.size();
    }
    PERSERVE_RETURN_IF_ERROR(connection_->SendColumns(std::move(columns)));
  }
  in_flight_.push_back(SentAdd{id, columns_send, count, /*anchored=*/!add});
  steps_sent_ += count;
  return Status::Ok();
}

Status ActorClient::CanAdd(bool* ready) {
  if (closed_) return Status::FailedPrecondition("the actor is closed");
  bool collected = true;
  while (!in_flight_.empty() && collected) PERSERVE_RETURN_IF_ERROR(CollectOldest(/*wait=*/false, &collected));
  *ready = static_cast<int>(in_flight_.size()) < options_.max_in_flight;
  return Status::Ok();
}

Status ActorClient::CollectOldest(bool wait, bool* collected) {
  const SentAdd oldest = in_flight_.front();
  std::vector<std::byte> message;
  proto::Frame frame;
  bool arrived = true;
  Status status = wait ? connection_->AwaitReply(oldest.request_id, &message, &frame)
                       : connection_->PollReply(oldest.request_id, &arrived, &message, &frame);
  if (collected != nullptr) *collected = arrived;
  if (!arrived) return status;  // OK unless the poll itself failed
  in_flight_.pop_front();
  // The server answers once it has the columns, or once it knows to drop them when they come: then
  // their send completes (at once, or when the server takes them), and the memory is the caller's again.
  if (oldest.columns_send != 0) PERSERVE_RETURN_IF_ERROR(connection_->AwaitSent(oldest.columns_send));
  proto::AddReply reply;
  if (status.ok()) status = proto::DecodeMeta(frame, &reply);
  if (status.ok()) {
    last_first_key_ = reply.first_key;
    items_acknowledged_ += reply.count;
    steps_acknowledged_ += oldest.steps;
    RewindIfDrained();
    return Status::Ok();
  }
  // A refused add's steps are not in the stream (the adds after it stand
  // alone); a refused append refuses the appends after it (their first step
  // is past the server's), and the stream goes on from what was acknowledged.
  if (!oldest.anchored) {
    steps_sent_ -= oldest.steps;
  } else if (oldest.steps > 0) {
    stream_rejected_ = true;
  }
  ++rejected_batches_;
  if (unreported_rejections_++ == 0) first_rejection_ = status;
  RewindIfDrained();
  return Status::Ok();
}

void ActorClient::RewindIfDrained() {
  // Once every append after a refused one is answered (all refused too), the
  // stream goes on from the steps the server acknowledged.
  if (!stream_rejected_ || !in_flight_.empty()) return;
  steps_sent_ = steps_acknowledged_;
  stream_rejected_ = false;
}

Status ActorClient::TakePendingError(bool instead_of_send) {
  const int64_t count = std::exchange(unreported_rejections_, 0);
  const Status first = std::exchange(first_rejection_, Status::Ok());
  if (count == 0) return Status::Ok();
  const std::string not_sent = instead_of_send ? ", and this one was not sent" : "";
  const std::string what = count == 1 ? fmt::format("an earlier batch was rejected{}: ", not_sent)
                                      : fmt::format("{} earlier batches were rejected{}; the first: ", count, not_sent);
  return Status::FromCode(static_cast<int>(first.code()), what + first.message());
}

Status ActorClient::Flush() {
  while (!in_flight_.empty()) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  return TakePendingError(/*instead_of_send=*/false);
}

Status ActorClient::Close() {
  if (closed_) return Status::Ok();
  OpenClients::Unregister(this);
  const Status flushed = Flush();
  closed_ = true;
  const Status closed = connection_->Close();
  return flushed.ok() ? closed : flushed;
}

Status ActorClient::Peers(MPI_Comm* peers) { return connection_->Peers(peers); }

}  // namespace perserve
