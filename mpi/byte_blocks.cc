#include "mpi/byte_blocks.h"

#include "mpi/communicator.h"

namespace perserve::mpi {

void ByteBlocks::Add(const void* data, size_t bytes) {
  MPI_Aint address = 0;
  MPI_Get_address(data, &address);
  if (!bytes_.empty() && MPI_Aint_add(addresses_.back(), bytes_.back()) == address) {
    bytes_.back() += static_cast<int>(bytes);
    return;
  }
  bytes_.push_back(static_cast<int>(bytes));
  addresses_.push_back(address);
}

Status ByteBlocks::Commit(MPI_Datatype* type) const {
  PERSERVE_RETURN_IF_ERROR(Check(MPI_Type_create_hindexed(static_cast<int>(bytes_.size()), bytes_.data(),
                                                          addresses_.data(), MPI_BYTE, type),
                                 "MPI_Type_create_hindexed"));
  const Status committed = Check(MPI_Type_commit(type), "MPI_Type_commit");
  if (!committed.ok()) MPI_Type_free(type);
  return committed;
}

}  // namespace perserve::mpi
