// ScopedDevice: runs one operation on a given CUDA device, whatever device
// the calling thread had selected, and gives the thread its own back after.
// nvcc, or g++ with the CUDA runtime's headers.
#pragma once

#include <cuda_runtime.h>

#include "perserve/status.h"
#include "tree/cuda/cuda_check.h"

namespace perserve::cuda {

class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (switched_) cudaSetDevice(previous_);
  }

  // Makes `device` current until this object goes (a negative device, for
  // objects made without one in tests, changes nothing). Queues no work.
  Status Enter(int device) {
    if (device < 0) return Status::Ok();
    PERSERVE_RETURN_IF_ERROR(Check(cudaGetDevice(&previous_), "cudaGetDevice"));
    if (previous_ == device) return Status::Ok();
    PERSERVE_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
    switched_ = true;
    return Status::Ok();
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace perserve::cuda
