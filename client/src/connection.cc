#include "client/src/connection.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace perserve::client_internal {
namespace {

// The tag MPI_Comm_create_group uses on the joined communicator for Peers;
// no perserve message uses it.
constexpr int kPeersTag = 7399;

uint64_t RequestIdOf(const std::vector<std::byte>& buffer, size_t length) {
  proto::FrameHeader header;
  if (length >= proto::kFrameHeaderBytes) std::memcpy(&header, buffer.data(), sizeof(header));
  return header.request_id;
}

}  // namespace

const std::vector<proto::TableSchemas>& Connection::tables() const {
  if (default_tables_.empty()) {
    default_tables_.push_back(proto::TableSchemas{"default", steps(), sample_schema(), item_schema()});
  }
  return default_tables_;
}

Status Connection::TableIndex(std::string_view name, int* index) const {
  *index = 0;
  if (name.empty()) return Status::Ok();
  const std::vector<proto::TableSchemas>& served = tables();
  for (size_t t = 0; t < served.size(); ++t) {
    if (served[t].name == name) {
      *index = static_cast<int>(t);
      return Status::Ok();
    }
  }
  std::string names;
  for (const proto::TableSchemas& table : served) names += (names.empty() ? "\"" : ", \"") + table.name + "\"";
  return Status::InvalidArgument(
      fmt::format("no table \"{}\": the server's tables are {}; nothing was sent", name, names));
}

Status MpiConnection::Join(MPI_Comm parent, proto::Role role) {
  PERSERVE_RETURN_IF_ERROR(mpi::Join(parent, role, nullptr, &comm_, &join_));
  if (role != proto::Role::kBystander && join_.server_rank < 0) {
    return Status::Internal("the join assigned no server to this client");
  }
  return Status::Ok();
}

Status MpiConnection::SendTo(int shard, std::vector<std::byte> frame) {
  if (shard < 0 || shard >= shard_count()) {
    return Status::Internal(fmt::format("no shard {} among this client's {} servers", shard, shard_count()));
  }
  PERSERVE_RETURN_IF_ERROR(sends_.Progress());
  return sends_.Send(std::move(frame), join_.servers[static_cast<size_t>(shard)], proto::kRequestTag, comm_.get());
}

Status MpiConnection::SendColumns(std::vector<std::byte> columns) {
  PERSERVE_RETURN_IF_ERROR(sends_.Progress());
  return sends_.Send(std::move(columns), join_.servers.front(), proto::kAddColumnsTag, comm_.get());
}

Status MpiConnection::SendColumnsFrom(std::span<const std::span<const std::byte>> columns, uint64_t* token) {
  PERSERVE_RETURN_IF_ERROR(sends_.Progress());
  blocks_.Clear();
  int64_t bytes = 0;
  for (const std::span<const std::byte> column : columns) {
    blocks_.Add(column.data(), column.size());
    bytes += static_cast<int64_t>(column.size());
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  PERSERVE_RETURN_IF_ERROR(blocks_.Commit(&type));
  *token = next_token_++;
  return sends_.SendTyped({}, &type, bytes, join_.servers.front(), proto::kAddColumnsTag, comm_.get(),
                          /*tracked=*/false, *token);
}

Status Connection::AwaitReply(uint64_t request_id, std::vector<std::byte>* message, proto::Frame* frame) {
  size_t answered = 0;
  return AwaitFirstReply(std::span(&request_id, 1), &answered, message, frame);
}

Status Connection::AwaitFirstReply(std::span<const uint64_t> request_ids, size_t* answered,
                                   std::vector<std::byte>* message, proto::Frame* frame) {
  const auto index_of = [request_ids](uint64_t id) {
    return static_cast<size_t>(std::find(request_ids.begin(), request_ids.end(), id) - request_ids.begin());
  };
  for (size_t i = 0; i < request_ids.size(); ++i) {
    const auto early = early_replies_.find(request_ids[i]);
    if (early == early_replies_.end()) continue;
    *answered = i;
    TakeEarly(early, message);
    return Finish(message, frame);
  }
  while (true) {
    size_t length = 0;
    bool received = false;
    PERSERVE_RETURN_IF_ERROR(ReceiveReply(/*wait=*/true, message, &length, &received));
    *answered = index_of(RequestIdOf(*message, length));
    if (*answered < request_ids.size()) {
      message->resize(length);  // shrinks: no reallocation, the capacity stays for the next reply
      return Finish(message, frame);
    }
    KeepEarly(message, length);
  }
}

Status Connection::PollReply(uint64_t request_id, bool* ready, std::vector<std::byte>* message,
                             proto::Frame* frame) {
  *ready = false;
  auto early = early_replies_.find(request_id);
  while (early == early_replies_.end()) {
    size_t length = 0;
    bool received = false;
    std::vector<std::byte> incoming = std::exchange(spare_, {});
    const Status status = ReceiveReply(/*wait=*/false, &incoming, &length, &received);
    if (received) KeepEarly(&incoming, length);
    if (incoming.capacity() > spare_.capacity()) spare_ = std::move(incoming);
    PERSERVE_RETURN_IF_ERROR(status);
    if (!received) return ProgressSends();
    early = early_replies_.find(request_id);
  }
  TakeEarly(early, message);
  *ready = true;
  return Finish(message, frame);
}

void Connection::KeepEarly(std::vector<std::byte>* buffer, size_t length) {
  std::vector<std::byte>& kept = early_replies_[RequestIdOf(*buffer, length)];
  if (length <= kCopyEarlyReplyBytes) {
    kept.assign(buffer->begin(), buffer->begin() + static_cast<std::ptrdiff_t>(length));
    return;
  }
  buffer->resize(length);
  kept = std::move(*buffer);
  *buffer = std::exchange(spare_, {});
}

void Connection::TakeEarly(std::map<uint64_t, std::vector<std::byte>>::iterator early,
                           std::vector<std::byte>* message) {
  if (message->capacity() > spare_.capacity()) spare_ = std::move(*message);
  *message = std::move(early->second);
  early_replies_.erase(early);
}

Status Connection::Finish(std::vector<std::byte>* message, proto::Frame* frame) {
  PERSERVE_RETURN_IF_ERROR(ProgressSends());
  PERSERVE_RETURN_IF_ERROR(proto::DecodeFrame(*message, frame));
  if (frame->kind() == proto::MessageKind::kErrorReply) {
    proto::ErrorReply error;
    PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(*frame, &error));
    return Status::FromCode(error.code, "server: " + error.message);
  }
  return Status::Ok();
}

Status MpiConnection::ReceiveReply(bool wait, std::vector<std::byte>* buffer, size_t* length, bool* received) {
  // Only servers send replies, so with several any source will do.
  const int source = join_.servers.size() == 1 ? join_.server_rank : MPI_ANY_SOURCE;
  return mpi::ReceiveGrowing(comm_.get(), source, proto::kReplyTag, wait, buffer, length, received);
}

Status MpiConnection::Peers(MPI_Comm* peers) const {
  MPI_Group all = MPI_GROUP_NULL, others = MPI_GROUP_NULL;
  Status status = mpi::Check(MPI_Comm_group(comm_.get(), &all), "MPI_Comm_group");
  if (status.ok()) {
    status = mpi::Check(MPI_Group_excl(all, static_cast<int>(join_.server_ranks.size()), join_.server_ranks.data(),
                                       &others),
                        "MPI_Group_excl");
  }
  if (status.ok()) {
    status = mpi::Check(MPI_Comm_create_group(comm_.get(), others, kPeersTag, peers), "MPI_Comm_create_group");
  }
  if (others != MPI_GROUP_NULL) MPI_Group_free(&others);
  if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
  return status;
}

Status Connection::Close() {
  std::vector<uint64_t> ids;
  for (int shard = 0; shard < shard_count(); ++shard) {
    ids.push_back(NextRequestId());
    std::vector<std::byte> frame;
    proto::EncodeFrame(proto::MessageKind::kCloseRequest, ids.back(), proto::Empty{}, {}, &frame);
    PERSERVE_RETURN_IF_ERROR(SendTo(shard, std::move(frame)));
  }
  for (uint64_t id : ids) {
    std::vector<std::byte> reply;
    proto::Frame decoded;
    PERSERVE_RETURN_IF_ERROR(AwaitReply(id, &reply, &decoded));
    if (decoded.kind() != proto::MessageKind::kCloseReply) {
      return Status::Internal(fmt::format("close answered with message kind {}", decoded.header.kind));
    }
  }
  return DrainSends();
}

}  // namespace perserve::client_internal
