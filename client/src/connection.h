// Connection: one client's link to its replay rank (internal to the client
// library): the joined communicator, request ids, sends that complete in the
// background, and replies matched to their requests by id (a deferred sample
// reply can arrive after the replies to later requests).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "mpi/communicator.h"
#include "mpi/join.h"
#include "mpi/send_queue.h"
#include "proto/codec.h"

namespace perserve::client_internal {

class Connection {
 public:
  // Collective over `parent`. A bystander has no server (server_rank -1).
  Status Join(MPI_Comm parent, proto::Role role);

  const Schema& schema() const { return join_.schema; }
  uint64_t NextRequestId() { return next_request_id_++; }

  // A buffer to encode the next frame into (recycled; see mpi::SendQueue).
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) { return sends_.Acquire(expected_bytes); }

  // Sends a frame without waiting for it to be received; the buffer is kept
  // until MPI reports the send complete.
  Status Send(std::vector<std::byte> frame);

  // Waits for the reply to `request_id`; replies to other requests that
  // arrive first are kept for their own callers. An ErrorReply becomes the
  // returned status. On success `frame` points into `*message`.
  Status AwaitReply(uint64_t request_id, std::vector<std::byte>* message, proto::Frame* frame);

  // The same without waiting: *ready false (and OK) when the reply has not
  // arrived yet. Receives whatever replies are waiting, keeping them.
  Status PollReply(uint64_t request_id, bool* ready, std::vector<std::byte>* message, proto::Frame* frame);

  // Collective over every non-server rank of the joined communicator: a new
  // communicator over them (MPI_Comm_create_group, so servers take no part).
  Status Peers(MPI_Comm* peers) const;

  // Sends kCloseRequest and waits for its reply, then for every send.
  Status Close();

 private:
  // Decodes a reply to `request_id` taken from early_replies_.
  Status Finish(std::vector<std::byte>* message, proto::Frame* frame);

  mpi::Communicator comm_;
  mpi::JoinResult join_;
  uint64_t next_request_id_ = 1;
  mpi::SendQueue sends_;
  std::map<uint64_t, std::vector<std::byte>> early_replies_;
};

}  // namespace perserve::client_internal
