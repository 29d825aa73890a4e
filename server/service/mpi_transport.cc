#include "service/mpi_transport.h"

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

// A send MPI has not completed is one the client has not matched yet (eager
// messages complete at once; a sample reply of more than the eager limit
// waits for the client's receive).
Transport::Unread MpiTransport::UnreadSampleReplies(int client) const {
  const mpi::SendQueue::InFlight in_flight = sends_.TrackedInFlight(client_ranks_[client]);
  return Unread{in_flight.messages, in_flight.bytes};
}

}  // namespace perserve::service
