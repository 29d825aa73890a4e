// SendQueue: MPI_Isend from buffers the queue owns until MPI reports each send
// complete, so a sender never waits for its peer to post a receive.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
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
  // kept, so steady traffic of like-sized messages neither allocates nor
  // page-faults: a fresh multi-megabyte vector costs a zero-fill and a fault
  // per page. A buffer keeps its size, and the one picked is the closest in
  // capacity to `expected_bytes` (by ratio): a small frame whose estimate is
  // a few bytes off takes a small buffer, not a large one it would shrink
  // (whose next large message would then zero-fill it again as it grows).
  std::vector<std::byte> Acquire(size_t expected_bytes);

  // Starts sending `bytes` (at most 2 GiB) to `rank` with `tag`; `tracked`
  // sends are counted by TrackedInFlight until they complete.
  Status Send(std::vector<std::byte> bytes, int rank, int tag, MPI_Comm comm, bool tracked = false);
  // Starts sending one message of `bytes` bytes laid out by `*type` over
  // absolute addresses (MPI_BOTTOM), for example a frame's head (`head`, kept
  // until the send completes) and rows that stay where they are. Frees
  // `*type` (MPI keeps it while the send needs it). Once the send has
  // completed, TakeCompleted hands out `token`: until then the memory `*type`
  // names must not change.
  Status SendTyped(std::vector<std::byte> head, MPI_Datatype* type, int64_t bytes, int rank, int tag, MPI_Comm comm,
                   bool tracked, uint64_t token);
  // The tokens of the typed sends completed since the last call.
  void TakeCompleted(std::vector<uint64_t>* tokens);
  // Waits until the typed send `token` has completed (at once if it has);
  // TakeCompleted then no longer hands it out.
  Status Await(uint64_t token);
  // Releases the buffers of completed sends. Never blocks.
  Status Progress();
  // Waits for every send.
  Status Drain();
  size_t in_flight() const { return requests_.size(); }

  // The tracked sends to `rank` not yet complete, and their bytes. O(1).
  struct InFlight {
    int messages = 0;
    int64_t bytes = 0;
  };
  InFlight TrackedInFlight(int rank) const;

  // Completed buffers kept for reuse: at most this many, none larger than
  // kPoolBufferBytes, together at most kPoolBytes; larger ones are freed.
  static constexpr size_t kPoolSize = 8;
  static constexpr size_t kPoolBufferBytes = size_t{64} << 20;
  static constexpr size_t kPoolBytes = size_t{128} << 20;
  size_t pooled_bytes() const;

 private:
  // Drops the requests MPI has completed (MPI_REQUEST_NULL now), keeping their buffers for Acquire.
  void ReleaseCompleted();
  // Starts tracking a send begun as `request`.
  void Started(MPI_Request request, std::vector<std::byte> buffer, int64_t bytes, int rank, bool tracked,
               uint64_t token);

  std::vector<MPI_Request> requests_;            // parallel to buffers_, bytes_, tokens_ and tracked_ranks_
  std::vector<int64_t> bytes_;                   // each send's message bytes
  std::vector<uint64_t> tokens_;                 // a typed send's token, else 0
  std::vector<uint64_t> completed_tokens_;       // TakeCompleted's answer
  std::vector<int> tracked_ranks_;               // the destination of a tracked send, else -1
  std::unordered_map<int, InFlight> tracked_;    // TrackedInFlight's answers, kept as sends start and complete
  std::vector<std::vector<std::byte>> buffers_;  // a moved vector keeps its heap block
  std::vector<int> done_;                        // scratch for MPI_Testsome
  std::vector<std::vector<std::byte>> pool_;     // buffers of completed sends
};

}  // namespace perserve::mpi
