// The one place CUDA errors become Status values (device code only: nvcc).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "perserve/status.h"

namespace perserve::cuda {

// Turns a CUDA error into a Status naming the call, and clears the runtime's
// last-error slot so the next check does not report it again. A sticky error
// (an illegal address in a kernel, say) cannot be cleared: the context is lost
// and every later call fails; the tree then refuses further work (OnDevice).
inline Status Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(std::string(what) + " failed: " + cudaGetErrorString(error));
}

}  // namespace perserve::cuda
