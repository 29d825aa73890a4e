// The one place CUDA errors become Status values (device code only: nvcc).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "perserve/status.h"

namespace perserve::cuda {

// Turns a CUDA error into a Status naming the call, clearing the sticky error
// so later calls start clean.
inline Status Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(std::string(what) + " failed: " + cudaGetErrorString(error));
}

}  // namespace perserve::cuda
