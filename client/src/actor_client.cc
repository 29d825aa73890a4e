#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "client/src/connection.h"
#include "perserve/client.h"

namespace perserve {

using client_internal::Connection;

Status ActorClient::Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<ActorClient>* actor) {
  if (options.max_in_flight < 1) return Status::InvalidArgument("max_in_flight must be >= 1");
  auto connection = std::make_unique<Connection>();
  PERSERVE_RETURN_IF_ERROR(connection->Join(comm, proto::Role::kActor));
  actor->reset(new ActorClient(std::move(connection), options));
  return Status::Ok();
}

ActorClient::ActorClient(std::unique_ptr<Connection> connection, ClientOptions options)
    : connection_(std::move(connection)), options_(options) {}

ActorClient::~ActorClient() { (void)Close(); }

const Schema& ActorClient::schema() const { return connection_->schema(); }

Status ActorClient::Add(const BatchView& batch, std::span<const double> priorities) {
  if (closed_) return Status::FailedPrecondition("the actor is closed");
  const Schema& schema = connection_->schema();
  if (batch.size < 1) return Status::InvalidArgument(fmt::format("a batch of {} items", batch.size));
  if (batch.columns.size() != schema.columns.size()) {
    return Status::InvalidArgument(fmt::format("the batch has {} columns, the schema {} ({})", batch.columns.size(),
                                               schema.columns.size(), schema.ToString()));
  }
  if (!priorities.empty() && static_cast<int64_t>(priorities.size()) != batch.size) {
    return Status::InvalidArgument(fmt::format("{} priorities for {} items", priorities.size(), batch.size));
  }
  while (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  if (!pending_error_.ok()) {
    const Status earlier = std::exchange(pending_error_, Status::Ok());
    return Status::FromCode(static_cast<int>(earlier.code()),
                            "an earlier batch was rejected, and this one was not sent: " + earlier.message());
  }

  // One contiguous frame: the columns in schema order, then the priorities.
  std::vector<std::span<const std::byte>> parts;
  for (size_t i = 0; i < batch.columns.size(); ++i) {
    if (batch.columns[i] == nullptr) return Status::InvalidArgument(fmt::format("column {} is NULL", i));
    parts.emplace_back(static_cast<const std::byte*>(batch.columns[i]),
                       static_cast<size_t>(batch.size * schema.columns[i].ItemBytes()));
  }
  size_t bulk_bytes = 0;
  for (const auto& part : parts) bulk_bytes += part.size();
  const uint64_t id = connection_->NextRequestId();
  const proto::AddRequest request{batch.size, !priorities.empty()};
  std::vector<std::byte> frame = connection_->AcquireBuffer(bulk_bytes + priorities.size_bytes() + 64);
  std::span<std::byte> tail = proto::EncodeFrameWithTail(proto::MessageKind::kAddRequest, id,
                                                         proto::SerializeMeta(request), {}, bulk_bytes +
                                                         priorities.size_bytes(), &frame);
  for (const auto& part : parts) {
    std::memcpy(tail.data(), part.data(), part.size());
    tail = tail.subspan(part.size());
  }
  if (!priorities.empty()) std::memcpy(tail.data(), priorities.data(), priorities.size_bytes());
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  in_flight_.push_back(id);
  return Status::Ok();
}

Status ActorClient::CollectOldest() {
  const uint64_t id = in_flight_.front();
  in_flight_.erase(in_flight_.begin());
  std::vector<std::byte> message;
  proto::Frame frame;
  Status status = connection_->AwaitReply(id, &message, &frame);
  proto::AddReply reply;
  if (status.ok()) status = proto::DecodeMeta(frame, &reply);
  if (status.ok()) {
    last_first_key_ = reply.first_key;
    items_acknowledged_ += reply.count;
  } else if (pending_error_.ok()) {
    pending_error_ = status;
  }
  return Status::Ok();
}

Status ActorClient::Flush() {
  while (!in_flight_.empty()) PERSERVE_RETURN_IF_ERROR(CollectOldest());
  return std::exchange(pending_error_, Status::Ok());
}

Status ActorClient::Close() {
  if (closed_) return Status::Ok();
  const Status flushed = Flush();
  closed_ = true;
  const Status closed = connection_->Close();
  return flushed.ok() ? closed : flushed;
}

}  // namespace perserve
