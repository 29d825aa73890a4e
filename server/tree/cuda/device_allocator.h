// DeviceAllocator: what the CUDA tree and scan allocate their buffers with.
// cudaMalloc and cudaHostAlloc in production (CudaAllocator, cuda_allocator.h),
// a stand-in in host tests. Plain C++.
#pragma once

#include <cstddef>

#include "perserve/status.h"

namespace perserve::cuda {

enum class MemoryKind {
  kDevice,               // device memory: no host address
  kMapped,               // pinned host memory the device reads and writes in place
  kMappedWriteCombined,  // the same, write-combined: fast for the host to write, slow for it to read
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // `bytes` (> 0) of `kind`: *host is the host's address (null for kDevice),
  // *device the device's. kResourceExhausted when memory is short; on any
  // error nothing stays allocated. Queues no device work.
  virtual Status Allocate(MemoryKind kind, size_t bytes, void** host, void** device) = 0;
  // Frees what Allocate gave (nothing for null addresses). Errors have
  // nowhere to go and are dropped.
  virtual void Free(MemoryKind kind, void* host, void* device) = 0;
};

}  // namespace perserve::cuda
