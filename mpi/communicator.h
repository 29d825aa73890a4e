// Communicator: owns a duplicate of the caller's communicator with
// MPI_ERRORS_RETURN set on it, so that MPI failures come back as Status values
// instead of aborting the job (a check on a communicator left at the default
// MPI_ERRORS_ARE_FATAL can never fire). Freed in the destructor.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "perserve/status.h"

namespace perserve::mpi {

// Turns an MPI return code into a Status naming the call that failed.
Status Check(int code, const char* what);

// Receives the next message from `source` with `tag` into `buffer` (resized
// to fit). With wait false it returns at once, *received false, when none is
// waiting; with wait true it blocks until one arrives. A matched probe
// (MPI_Improbe / MPI_Mprobe + MPI_Mrecv), so no other thread's receive can
// take the message between the probe and the receive.
// `tag` may be MPI_ANY_TAG; the matched message's tag goes to *matched_tag if given.
Status ReceiveBytes(MPI_Comm comm, int source, int tag, bool wait, std::vector<std::byte>* buffer, bool* received,
                    int* matched_tag = nullptr);
// The same into a buffer that only grows: the message's bytes are the first
// *length of `buffer`, the rest is left from earlier messages. A receiver
// that alternates small and large messages in one buffer then neither
// reallocates nor zero-fills the large ones' bytes again (a learner's
// 29 MB Atari sample reply after a priority update's acknowledgement).
Status ReceiveGrowing(MPI_Comm comm, int source, int tag, bool wait, std::vector<std::byte>* buffer, size_t* length,
                      bool* received, int* matched_tag = nullptr);

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
