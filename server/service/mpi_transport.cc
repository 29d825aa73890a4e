#include "service/mpi_transport.h"

#include "mpi/communicator.h"
#include "proto/messages.h"

namespace perserve::service {

MpiTransport::MpiTransport(MPI_Comm comm, std::vector<int> client_ranks)
    : comm_(comm), client_ranks_(std::move(client_ranks)) {}

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
