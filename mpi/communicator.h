// Communicator: owns a duplicate of the caller's communicator with
// MPI_ERRORS_RETURN set on it, so that MPI failures come back as Status values
// instead of aborting the job (a check on a communicator left at the default
// MPI_ERRORS_ARE_FATAL can never fire). Freed in the destructor.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "perserve/status.h"

namespace perserve::mpi {

// Turns an MPI return code into a Status naming the call that failed.
Status Check(int code, const char* what);

// Ends the wait for a matched message's bytes: a sender that dies after its
// message was matched (a launcher's SIGTERM reaches every rank at once) never
// sends the rest, and MPI_Mrecv would wait for ever. Both empty: wait for ever.
struct StopWaiting {
  // Once this returns true, the wait ends kAbandonAfter later (a live sender
  // finishes within it) with UNAVAILABLE.
  std::function<bool()> terminating;
  // While this returns true, the wait ends at once with UNAVAILABLE and makes
  // no further MPI call: over TCP, Open MPI reports a peer that died through
  // mpirun and blocks until mpirun answers, which it does not while it waits
  // to kill the job (docs/checkpoints.md).
  std::function<bool()> paused;
  bool empty() const { return !terminating && !paused; }
};
inline constexpr std::chrono::milliseconds kAbandonAfter{500};

// Completes a matched message into (buffer, count, type), as MPI_Mrecv, but
// polling, so `stop_waiting` can end the wait. An abandoned receive may still
// write into the buffer later: `owner`'s storage (if given) is then kept
// until exit; other buffers are the caller's to keep from being read. A
// receive given up on while paused keeps its request (never freed: freeing it
// is an MPI call).
Status ReceiveMatched(MPI_Message* message, void* buffer, int count, MPI_Datatype type,
                      const StopWaiting& stop_waiting, std::vector<std::byte>* owner = nullptr);

// Receives the next message from `source` with `tag` into `buffer` (resized
// to fit). With wait false it returns at once, *received false, when none is
// waiting; with wait true it blocks until one arrives. A matched probe
// (MPI_Improbe / MPI_Mprobe + MPI_Mrecv), so no other thread's receive can
// take the message between the probe and the receive. While
// `stop_waiting.paused` returns true, nothing is received (no MPI call).
// `tag` may be MPI_ANY_TAG; the matched message's tag goes to *matched_tag if given.
Status ReceiveBytes(MPI_Comm comm, int source, int tag, bool wait, std::vector<std::byte>* buffer, bool* received,
                    int* matched_tag = nullptr, const StopWaiting& stop_waiting = {});
// The same into a buffer that only grows: the message's bytes are the first
// *length of `buffer`, the rest is left from earlier messages. A receiver
// that alternates small and large messages in one buffer then neither
// reallocates nor zero-fills the large ones' bytes again (a learner's
// 29 MB Atari sample reply after a priority update's acknowledgement).
Status ReceiveGrowing(MPI_Comm comm, int source, int tag, bool wait, std::vector<std::byte>* buffer, size_t* length,
                      bool* received, int* matched_tag = nullptr, const StopWaiting& stop_waiting = {});

class Communicator {
 public:
  Communicator() = default;
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Duplicates `parent` (collective over it). Calls MPI_Init first if needed.
  Status Duplicate(MPI_Comm parent);
  // The same in two steps, so the caller can wait in MPI_Test: Begin starts
  // MPI_Comm_idup; once `*request` completes, Finish sets the duplicate up.
  Status BeginDuplicate(MPI_Comm parent, MPI_Request* request);
  Status FinishDuplicate();

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  int size_ = 0;
};

}  // namespace perserve::mpi
