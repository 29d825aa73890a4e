#include "service/transport/mpi_transport.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "mpi/communicator.h"
#include "proto/messages.h"

namespace perserve::service {

MpiTransport::MpiTransport(MPI_Comm comm, std::vector<int> client_ranks, std::vector<ClientRole> roles)
    : comm_(comm), client_ranks_(std::move(client_ranks)), roles_(std::move(roles)) {
  roles_.resize(client_ranks_.size(), ClientRole::kUnknown);
  probed_.resize(client_ranks_.size());
  held_sample_replies_.resize(client_ranks_.size());
}

std::vector<ClientRole> MpiTransport::ClientRoles(const mpi::JoinResult& joined) {
  std::vector<ClientRole> roles;
  for (int rank : joined.client_ranks) {
    const proto::Role role = rank < static_cast<int>(joined.roles.size()) ? joined.roles[rank] : proto::Role::kBystander;
    roles.push_back(role == proto::Role::kActor     ? ClientRole::kActor
                    : role == proto::Role::kLearner ? ClientRole::kLearner
                                                    : ClientRole::kUnknown);
  }
  return roles;
}

Status MpiTransport::TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) {
  *received = false;
  if (Paused()) return Status::Ok();
  const Status status = mpi::ReceiveBytes(comm_, client_ranks_[client], MPI_ANY_TAG, /*wait=*/false, buffer,
                                          received, tag, stop_waiting_);
  if (status.code() != Status::Code::kUnavailable) return status;
  spdlog::warn("{}: a message given up on: {}", ClientName(client), status.message());
  *received = false;
  return Status::Ok();
}

Status MpiTransport::ProbeColumns(int client, bool* arrived, int64_t* bytes) {
  ProbedColumns& probed = probed_[client];
  if (probed.message == MPI_MESSAGE_NULL) {
    if (Paused()) {
      *arrived = false;
      return Status::Ok();
    }
    int flag = 0;
    MPI_Status status;
    PERSERVE_RETURN_IF_ERROR(mpi::Check(
        MPI_Improbe(client_ranks_[client], proto::kAddColumnsTag, comm_, &flag, &probed.message, &status),
        "MPI_Improbe"));
    if (!flag) {
      probed.message = MPI_MESSAGE_NULL;
      *arrived = false;
      return Status::Ok();
    }
    MPI_Count count = 0;
    PERSERVE_RETURN_IF_ERROR(mpi::Check(MPI_Get_elements_x(&status, MPI_BYTE, &count), "MPI_Get_elements_x"));
    probed.bytes = static_cast<int64_t>(count);
  }
  *arrived = true;
  *bytes = probed.bytes;
  return Status::Ok();
}

Status MpiTransport::ColumnsArrived(int client, bool* arrived) const {
  *arrived = probed_[client].message != MPI_MESSAGE_NULL;
  if (*arrived || Paused()) return Status::Ok();
  int flag = 0;
  PERSERVE_RETURN_IF_ERROR(
      mpi::Check(MPI_Iprobe(client_ranks_[client], proto::kAddColumnsTag, comm_, &flag, MPI_STATUS_IGNORE),
                 "MPI_Iprobe"));
  *arrived = flag != 0;
  return Status::Ok();
}

Status MpiTransport::ReceiveColumns(int client, std::span<const std::span<std::byte>> regions) {
  ProbedColumns& probed = probed_[client];
  if (probed.message == MPI_MESSAGE_NULL) return Status::Internal("ReceiveColumns before ProbeColumns found them");
  if (regions.empty()) {  // dropped: received into a buffer freed at once (kept, if abandoned)
    std::vector<std::byte> dropped(static_cast<size_t>(probed.bytes));
    return mpi::ReceiveMatched(&probed.message, dropped.data(), static_cast<int>(dropped.size()), MPI_BYTE,
                               stop_waiting_, &dropped);
  }
  blocks_.Clear();
  for (const std::span<std::byte> region : regions) blocks_.Add(region.data(), region.size());
  MPI_Datatype type = MPI_DATATYPE_NULL;
  PERSERVE_RETURN_IF_ERROR(blocks_.Commit(&type));
  const Status status = mpi::ReceiveMatched(&probed.message, MPI_BOTTOM, 1, type, stop_waiting_);
  MPI_Type_free(&type);  // a receive still pending keeps its own reference
  return status;
}

Status MpiTransport::Send(int client, std::vector<std::byte> frame) {
  if (Paused() || !held_.empty()) {
    held_.push_back({client, std::move(frame), false});
    return Status::Ok();
  }
  return sends_.Send(std::move(frame), client_ranks_[client], proto::kReplyTag, comm_);
}

Status MpiTransport::SendSampleReply(int client, std::vector<std::byte> frame) {
  if (Paused() || !held_.empty()) {
    Unread& held = held_sample_replies_[client];
    ++held.replies;
    held.bytes += static_cast<int64_t>(frame.size());
    held_.push_back({client, std::move(frame), true});
    return Status::Ok();
  }
  return sends_.Send(std::move(frame), client_ranks_[client], proto::kReplyTag, comm_, /*tracked=*/true);
}

Status MpiTransport::SendSampleReplyBlocks(int client, std::vector<std::byte> frame, size_t head_bytes,
                                           std::span<const ReplyBlock> blocks, uint64_t* token) {
  // Held: gathered now (Transport's way), so nothing stays pinned.
  if (Paused() || !held_.empty()) {
    return Transport::SendSampleReplyBlocks(client, std::move(frame), head_bytes, blocks, token);
  }
  *token = 0;
  int64_t bytes = static_cast<int64_t>(head_bytes);
  blocks_.Clear();
  blocks_.Add(frame.data(), head_bytes);
  for (const ReplyBlock& block : blocks) {
    blocks_.Add(block.data, block.bytes);
    bytes += static_cast<int64_t>(block.bytes);
  }
  if (bytes > std::numeric_limits<int>::max()) {
    return Status::InvalidArgument(fmt::format("a sample reply of {} bytes exceeds MPI's 2 GiB message limit", bytes));
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  PERSERVE_RETURN_IF_ERROR(blocks_.Commit(&type));
  const uint64_t id = next_token_++;
  // `frame` moves into the queue; its buffer, which blocks may lie in, stays where it is.
  PERSERVE_RETURN_IF_ERROR(
      sends_.SendTyped(std::move(frame), &type, bytes, client_ranks_[client], proto::kReplyTag, comm_, true, id));
  *token = id;
  return Status::Ok();
}

// A send MPI has not completed is one the client has not matched yet (eager
// messages complete at once; a sample reply of more than the eager limit
// waits for the client's receive).
Transport::Unread MpiTransport::UnreadSampleReplies(int client) const {
  const mpi::SendQueue::InFlight in_flight = sends_.TrackedInFlight(client_ranks_[client]);
  const Unread& held = held_sample_replies_[client];
  return Unread{in_flight.messages + held.replies, in_flight.bytes + held.bytes};
}

Status MpiTransport::Progress() {
  if (Paused()) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(SendHeld());
  return sends_.Progress();
}

Status MpiTransport::Drain() {
  // At the end of serving, paused or not (the final checkpoint is complete
  // by then, or was never asked for).
  PERSERVE_RETURN_IF_ERROR(SendHeld());
  return sends_.Drain();
}

Status MpiTransport::SendHeld() {
  if (held_.empty()) return Status::Ok();
  spdlog::info("sending the {} replies held while the final checkpoint was written", held_.size());
  std::vector<HeldSend> held = std::exchange(held_, {});
  std::fill(held_sample_replies_.begin(), held_sample_replies_.end(), Unread{});
  for (HeldSend& send : held) {
    PERSERVE_RETURN_IF_ERROR(sends_.Send(std::move(send.frame), client_ranks_[send.client], proto::kReplyTag, comm_,
                                         /*tracked=*/send.sample_reply));
  }
  return Status::Ok();
}

}  // namespace perserve::service
