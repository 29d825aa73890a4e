// ByteBlocks: an MPI datatype over bytes where they lie (absolute addresses,
// sent or received with MPI_BOTTOM), so a message goes from or into memory
// that is not one buffer without being copied first: a sample reply's rows in
// the store, an add's columns into their ring slots, an actor's columns from
// the caller's arrays.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "perserve/status.h"

namespace perserve::mpi {

class ByteBlocks {
 public:
  void Clear() {
    bytes_.clear();
    addresses_.clear();
  }
  // The next `bytes` of the message at `data`; a block that starts where the
  // last one ends extends it.
  void Add(const void* data, size_t bytes);
  // The blocks so far as one committed hindexed datatype of MPI_BYTE; the
  // caller frees it (MPI keeps it while an operation started with it needs it).
  Status Commit(MPI_Datatype* type) const;

 private:
  std::vector<int> bytes_;
  std::vector<MPI_Aint> addresses_;
};

}  // namespace perserve::mpi
