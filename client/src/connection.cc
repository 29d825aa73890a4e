#include "client/src/connection.h"

#include <cstring>

#include <fmt/format.h>

namespace perserve::client_internal {

Status Connection::Join(MPI_Comm parent, proto::Role role) {
  PERSERVE_RETURN_IF_ERROR(mpi::Join(parent, role, nullptr, &comm_, &join_));
  if (join_.server_rank < 0) return Status::Internal("the join assigned no server to this client");
  return Status::Ok();
}

Status Connection::Send(std::vector<std::byte> frame) {
  PERSERVE_RETURN_IF_ERROR(sends_.Progress());
  return sends_.Send(std::move(frame), join_.server_rank, proto::kRequestTag, comm_.get());
}

Status Connection::AwaitReply(uint64_t request_id, std::vector<std::byte>* message, proto::Frame* frame) {
  auto early = early_replies_.find(request_id);
  if (early != early_replies_.end()) {
    *message = std::move(early->second);
    early_replies_.erase(early);
  } else {
    while (true) {
      bool received = false;
      PERSERVE_RETURN_IF_ERROR(
          mpi::ReceiveBytes(comm_.get(), join_.server_rank, proto::kReplyTag, /*wait=*/true, message, &received));
      proto::FrameHeader header;
      if (message->size() >= proto::kFrameHeaderBytes) std::memcpy(&header, message->data(), sizeof(header));
      if (header.request_id == request_id) break;
      early_replies_[header.request_id] = std::move(*message);
    }
  }
  PERSERVE_RETURN_IF_ERROR(sends_.Progress());
  PERSERVE_RETURN_IF_ERROR(proto::DecodeFrame(*message, frame));
  if (frame->kind() == proto::MessageKind::kErrorReply) {
    proto::ErrorReply error;
    PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(*frame, &error));
    return Status::FromCode(error.code, "server: " + error.message);
  }
  return Status::Ok();
}

Status Connection::Close() {
  const uint64_t id = NextRequestId();
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kCloseRequest, id, proto::Empty{}, {}, &frame);
  PERSERVE_RETURN_IF_ERROR(Send(std::move(frame)));
  std::vector<std::byte> reply;
  proto::Frame decoded;
  PERSERVE_RETURN_IF_ERROR(AwaitReply(id, &reply, &decoded));
  if (decoded.kind() != proto::MessageKind::kCloseReply) {
    return Status::Internal(fmt::format("close answered with message kind {}", decoded.header.kind));
  }
  return sends_.Drain();
}

}  // namespace perserve::client_internal
