#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "client/src/connection.h"
#include "client/src/open_clients.h"
#include "perserve/client.h"

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

Status ActorClient::Add(const BatchView& batch, std::span<const double> priorities) {
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
  return Add(spans, priorities);
}

Status ActorClient::Add(const ColumnSpans& batch, std::span<const double> priorities) {
  return Send(batch, priorities, /*borrow=*/false);
}

Status ActorClient::AddBorrowed(const ColumnSpans& batch, std::span<const double> priorities) {
  return Send(batch, priorities, /*borrow=*/true);
}

Status ActorClient::Send(const ColumnSpans& batch, std::span<const double> priorities, bool borrow) {
  if (closed_) return Status::FailedPrecondition("the actor is closed");
  if (connection_->steps()) {
    return Status::FailedPrecondition("this server stores step streams (perserve-server --n-step or "
                                      "--sequence-length): append steps and create items over them with Append "
                                      "(docs/steps.md); nothing was sent");
  }
  PERSERVE_RETURN_IF_ERROR(CheckBatch(connection_->schema(), batch, priorities));
  while (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  if (unreported_rejections_ > 0) return TakePendingError(/*instead_of_send=*/true);

  size_t column_bytes = 0;
  for (const auto& column : batch.columns) column_bytes += column.size();
  const bool apart = options_.columns_apart_min_bytes >= 0 && connection_->SendsColumnsApart() &&
                     column_bytes >= static_cast<size_t>(options_.columns_apart_min_bytes);
  const bool lent = apart && borrow;  // the columns go from the caller's memory, not copied
  const uint64_t id = connection_->NextRequestId();
  proto::AddRequest request{batch.size, !priorities.empty(), options_.add_timeout_seconds};
  request.columns_follow = apart;
  // One contiguous frame: the columns in schema order (unless apart), then the priorities.
  const size_t tail_bytes = (apart ? 0 : column_bytes) + priorities.size_bytes();
  std::vector<std::byte> frame = connection_->AcquireBuffer(tail_bytes + 64);
  std::span<std::byte> tail = proto::EncodeFrameWithTail(proto::MessageKind::kAddRequest, id,
                                                         proto::SerializeMeta(request), {}, tail_bytes, &frame);
  std::vector<std::byte> columns;
  std::span<std::byte> to = tail;
  if (apart && !lent) {
    columns = connection_->AcquireBuffer(column_bytes);
    columns.resize(column_bytes);
    to = columns;
  }
  if (!lent) {
    for (const auto& column : batch.columns) {
      std::memcpy(to.data(), column.data(), column.size());
      to = to.subspan(column.size());
    }
  }
  if (!apart) tail = to;
  if (!priorities.empty()) std::memcpy(tail.data(), priorities.data(), priorities.size_bytes());
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  uint64_t columns_send = 0;
  if (lent) {
    PERSERVE_RETURN_IF_ERROR(connection_->SendColumnsFrom(batch.columns, &columns_send));
  } else if (apart) {
    PERSERVE_RETURN_IF_ERROR(connection_->SendColumns(std::move(columns)));
  }
  in_flight_.push_back(SentAdd{id, columns_send});
  return Status::Ok();
}

bool ActorClient::stores_steps() const { return connection_->steps(); }

const Schema& ActorClient::item_schema() const { return connection_->item_schema(); }

Status ActorClient::Append(const ColumnSpans& steps, const NewItems& items) {
  if (closed_) return Status::FailedPrecondition("the actor is closed");
  if (!connection_->steps()) {
    return Status::FailedPrecondition("this server stores transitions: Append needs a server of step streams "
                                      "(perserve-server --n-step or --sequence-length; docs/steps.md); use Add");
  }
  const bool no_steps = steps.size == 0 && steps.columns.empty();
  if (!no_steps) PERSERVE_RETURN_IF_ERROR(CheckBatch(connection_->schema(), steps, {}));
  const int64_t count = no_steps ? 0 : steps.size;
  const int64_t item_count = static_cast<int64_t>(items.steps.size());
  if (count == 0 && item_count == 0) {
    return Status::InvalidArgument("an append of no steps and no items; nothing was sent");
  }
  if (!items.priorities.empty() && items.priorities.size() != items.steps.size()) {
    return Status::InvalidArgument(fmt::format("{} items with {} priorities: give one per item, or none (the "
                                               "server's max priority); nothing was sent",
                                               item_count, items.priorities.size()));
  }
  PERSERVE_RETURN_IF_ERROR(CheckPriorities(items.priorities));
  const Schema& item_schema = connection_->item_schema();
  if (item_schema.columns.empty()) {
    if (!items.columns.columns.empty()) {
      return Status::InvalidArgument("the server has no item columns (perserve-server --item-column), but the items "
                                     "carry columns; nothing was sent");
    }
  } else if (item_count > 0 || !items.columns.columns.empty()) {
    if (items.columns.size != item_count) {
      return Status::InvalidArgument(fmt::format("{} items with item columns of {} rows; nothing was sent",
                                                 item_count, items.columns.size));
    }
    PERSERVE_RETURN_IF_ERROR(CheckBatch(item_schema, items.columns, {}));
  }
  while (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  if (stream_rejected_) {
    // Every append sent after the refused one is refused too (its first step
    // is past the server's): once all are answered, the stream goes on from
    // the steps the server acknowledged.
    while (!in_flight_.empty()) PERSERVE_RETURN_IF_ERROR(CollectOldest());
    steps_sent_ = steps_acknowledged_;
    stream_rejected_ = false;
  }
  if (unreported_rejections_ > 0) return TakePendingError(/*instead_of_send=*/true);
  for (size_t i = 0; i < items.steps.size(); ++i) {
    if (items.steps[i] < 0 || items.steps[i] >= steps_sent_ + count) {
      return Status::InvalidArgument(fmt::format("item {}'s step {} is not in this actor's stream (its steps are 0 "
                                                 "to {} with this append's); nothing was sent",
                                                 i, items.steps[i], steps_sent_ + count - 1));
    }
  }

  proto::AddRequest request{count, !items.priorities.empty(), options_.add_timeout_seconds};
  request.first_step = steps_sent_;
  request.items = item_count;
  size_t tail_bytes = items.steps.size_bytes() + items.priorities.size_bytes();
  for (const auto& column : steps.columns) tail_bytes += column.size();
  for (const auto& column : items.columns.columns) tail_bytes += column.size();
  const uint64_t id = connection_->NextRequestId();
  std::vector<std::byte> frame = connection_->AcquireBuffer(tail_bytes + 96);
  std::span<std::byte> tail = proto::EncodeFrameWithTail(proto::MessageKind::kAddRequest, id,
                                                         proto::SerializeMeta(request), {}, tail_bytes, &frame);
  const auto put = [&tail](std::span<const std::byte> bytes) {
    if (!bytes.empty()) std::memcpy(tail.data(), bytes.data(), bytes.size());
    tail = tail.subspan(bytes.size());
  };
  if (count > 0) {
    for (const auto& column : steps.columns) put(column);
  }
  put(std::as_bytes(items.steps));
  put(std::as_bytes(items.priorities));
  for (const auto& column : items.columns.columns) put(column);
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  in_flight_.push_back(SentAdd{id, 0, count});
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
    return Status::Ok();
  }
  if (oldest.steps > 0) stream_rejected_ = true;
  ++rejected_batches_;
  if (unreported_rejections_++ == 0) first_rejection_ = status;
  return Status::Ok();
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
