// CudaAllocator: the DeviceAllocator of production, over cudaMalloc and
// cudaHostAlloc, every call checked by cuda::Check (so tests can fail any of
// them). nvcc, or g++ with the CUDA runtime's headers.
#pragma once

#include <cuda_runtime.h>

#include "tree/cuda/cuda_check.h"
#include "tree/cuda/device_allocator.h"

namespace perserve::cuda {

class CudaAllocator final : public DeviceAllocator {
 public:
  // The process's one instance (it holds no state).
  static CudaAllocator* Get() {
    static CudaAllocator allocator;
    return &allocator;
  }

  // On the calling thread's current device.
  Status Allocate(MemoryKind kind, size_t bytes, void** host, void** device) override {
    *host = *device = nullptr;
    if (kind == MemoryKind::kDevice) return Check(cudaMalloc(device, bytes), "cudaMalloc (device buffer)");
    const unsigned flags =
        cudaHostAllocMapped | (kind == MemoryKind::kMappedWriteCombined ? cudaHostAllocWriteCombined : 0u);
    PERSERVE_RETURN_IF_ERROR(Check(cudaHostAlloc(host, bytes, flags), "cudaHostAlloc (mapped buffer)"));
    const Status mapped = Check(cudaHostGetDevicePointer(device, *host, 0), "cudaHostGetDevicePointer");
    if (!mapped.ok()) {
      cudaFreeHost(*host);
      *host = *device = nullptr;
    }
    return mapped;
  }

  void Free(MemoryKind kind, void* host, void* device) override {
    if (kind == MemoryKind::kDevice) {
      if (device != nullptr) cudaFree(device);
    } else if (host != nullptr) {
      cudaFreeHost(host);
    }
    cudaGetLastError();
  }
};

}  // namespace perserve::cuda
