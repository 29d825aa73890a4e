#include "service/mpi_transport.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "mpi/communicator.h"
#include "proto/messages.h"

namespace perserve::service {

MpiTransport::MpiTransport(MPI_Comm comm, std::vector<int> client_ranks, std::vector<ClientRole> roles)
    : comm_(comm), client_ranks_(std::move(client_ranks)), roles_(std::move(roles)) {
  roles_.resize(client_ranks_.size(), ClientRole::kUnknown);
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
  return mpi::ReceiveBytes(comm_, client_ranks_[client], MPI_ANY_TAG, /*wait=*/false, buffer, received, tag);
}

Status MpiTransport::Send(int client, std::vector<std::byte> frame) {
  return sends_.Send(std::move(frame), client_ranks_[client], proto::kReplyTag, comm_);
}

Status MpiTransport::SendSampleReply(int client, std::vector<std::byte> frame) {
  return sends_.Send(std::move(frame), client_ranks_[client], proto::kReplyTag, comm_, /*tracked=*/true);
}

Status MpiTransport::SendSampleReplyRows(int client, std::vector<std::byte> head, const store::TransitionStore& store,
                                         std::span<const int64_t> slots, std::span<const char> copy_row,
                                         uint64_t* token) {
  *token = 0;
  const Schema& schema = store.schema();
  const int64_t bytes = static_cast<int64_t>(head.size()) + static_cast<int64_t>(slots.size()) * schema.ItemBytes();
  if (bytes > std::numeric_limits<int>::max()) {
    return Status::InvalidArgument(fmt::format("a sample reply of {} bytes exceeds MPI's 2 GiB message limit", bytes));
  }
  // The copied rows go behind the frame's head, in the order they are sent;
  // the buffer is sized first, so the addresses taken below stay valid.
  const size_t head_bytes = head.size();
  const auto copied = static_cast<size_t>(std::count_if(copy_row.begin(), copy_row.end(), [](char c) { return c; }));
  head.resize(head_bytes + copied * static_cast<size_t>(schema.ItemBytes()));
  std::byte* scratch = head.data() + head_bytes;
  block_bytes_.clear();
  block_addresses_.clear();
  const auto add_block = [this](const std::byte* data, size_t length) {
    MPI_Aint address = 0;
    MPI_Get_address(data, &address);
    if (!block_bytes_.empty() && MPI_Aint_add(block_addresses_.back(), block_bytes_.back()) == address) {
      block_bytes_.back() += static_cast<int>(length);  // continues the last block: one block
      return;
    }
    block_bytes_.push_back(static_cast<int>(length));
    block_addresses_.push_back(address);
  };
  add_block(head.data(), head_bytes);
  for (int column = 0; column < static_cast<int>(schema.columns.size()); ++column) {
    for (size_t i = 0; i < slots.size(); ++i) {
      const std::span<const std::byte> row = store.Rows(column, slots[i], 1);
      if (copy_row[i]) {
        std::memcpy(scratch, row.data(), row.size());
        add_block(scratch, row.size());
        scratch += row.size();
      } else {
        add_block(row.data(), row.size());
      }
    }
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  PERSERVE_RETURN_IF_ERROR(mpi::Check(MPI_Type_create_hindexed(static_cast<int>(block_bytes_.size()),
                                                               block_bytes_.data(), block_addresses_.data(), MPI_BYTE,
                                                               &type),
                                      "MPI_Type_create_hindexed"));
  const Status committed = mpi::Check(MPI_Type_commit(&type), "MPI_Type_commit");
  if (!committed.ok()) {
    MPI_Type_free(&type);
    return committed;
  }
  const uint64_t id = next_token_++;
  PERSERVE_RETURN_IF_ERROR(
      sends_.SendTyped(std::move(head), &type, bytes, client_ranks_[client], proto::kReplyTag, comm_, true, id));
  *token = id;
  return Status::Ok();
}

// A send MPI has not completed is one the client has not matched yet (eager
// messages complete at once; a sample reply of more than the eager limit
// waits for the client's receive).
Transport::Unread MpiTransport::UnreadSampleReplies(int client) const {
  const mpi::SendQueue::InFlight in_flight = sends_.TrackedInFlight(client_ranks_[client]);
  return Unread{in_flight.messages, in_flight.bytes};
}

}  // namespace perserve::service
