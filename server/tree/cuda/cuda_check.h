// The one place CUDA errors become Status values (nvcc, or g++ with the CUDA
// runtime's headers). Every CUDA call of the tree and the scan whose error
// matters goes through Check, so tests can make any of them fail on demand
// (cuda_failure_injection.h).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "perserve/status.h"
#include "tree/cuda/cuda_failure_injection.h"

namespace perserve::cuda {

// Turns a CUDA error into a Status naming the call: kResourceExhausted for
// cudaErrorMemoryAllocation (out of device or pinned host memory: the caller
// may try a smaller request later), kInternal for anything else. Clears the
// runtime's last-error slot so the next check does not report it again. A
// sticky error (an illegal address in a kernel, say) cannot be cleared: the
// context is lost and every later call fails; the tree then refuses further
// work (OperationLatch).
inline Status Check(cudaError_t error, const char* what) {
  error = static_cast<cudaError_t>(InjectedError(static_cast<int>(error), what));
  if (error == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  std::string message = std::string(what) + " failed: " + cudaGetErrorString(error);
  if (error == cudaErrorMemoryAllocation) return Status::ResourceExhausted(std::move(message));
  return Status::Internal(std::move(message));
}

}  // namespace perserve::cuda
