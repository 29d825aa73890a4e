// SendQueue: MPI_Isend from buffers the queue owns until MPI reports each send
// complete, so a sender never waits for its peer to post a receive.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "perserve/status.h"

namespace perserve::mpi {

class SendQueue {
 public:
  SendQueue() = default;
  ~SendQueue();  // waits for what is still in flight (while MPI is up)
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // A buffer for the next message, recycled from completed sends when one is
  // kept (the smallest holding `expected_bytes`, else the largest), so steady
  // traffic of like-sized messages neither allocates nor page-faults: a fresh
  // multi-megabyte vector costs a zero-fill and a fault per page.
  std::vector<std::byte> Acquire(size_t expected_bytes);

  // Starts sending `bytes` (at most 2 GiB) to `rank` with `tag`.
  Status Send(std::vector<std::byte> bytes, int rank, int tag, MPI_Comm comm);
  // Releases the buffers of completed sends. Never blocks.
  Status Progress();
  // Waits for every send.
  Status Drain();
  size_t in_flight() const { return requests_.size(); }

 private:
  std::vector<MPI_Request> requests_;            // parallel to buffers_
  std::vector<std::vector<std::byte>> buffers_;  // a moved vector keeps its heap block
  std::vector<int> done_;                        // scratch for MPI_Testsome
  std::vector<std::vector<std::byte>> pool_;     // buffers of completed sends
};

}  // namespace perserve::mpi
