// GrowingBuffers: a set of buffers that grow together, for the CUDA tree's
// staging and sort buffers and the CUDA scan's scratch. Plain C++: the policy
// is tested on the host with a stand-in allocator.
//
// Each buffer holds reserved() elements of its own size. Reserve(count) grows
// them to max(count, 2 * reserved()) elements (amortised: a server's batch
// sizes settle after a few calls, then nothing allocates), or to exactly
// `count` when the doubled size cannot be had. Growth is all or nothing: new
// buffers are allocated before the old are freed, and on any failure those
// already made are freed again, so a request that cannot be met leaves the
// buffers as they were and usable by the next, smaller one.
//
// Thread safety: none. The caller guarantees no device work uses the buffers
// while they grow (the tree and scan wait for their own work in every call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "perserve/status.h"
#include "tree/cuda/device_allocator.h"

namespace perserve::cuda {

class GrowingBuffers {
 public:
  struct Layout {
    MemoryKind kind;
    size_t element_bytes;  // > 0
  };

  // `allocator` must outlive this object.
  GrowingBuffers(DeviceAllocator* allocator, std::vector<Layout> layouts);
  ~GrowingBuffers() { Release(); }
  GrowingBuffers(const GrowingBuffers&) = delete;
  GrowingBuffers& operator=(const GrowingBuffers&) = delete;

  // Makes every buffer hold at least `count` elements (see above). Ok at once
  // when they already do. kResourceExhausted when memory is short (or the
  // byte count would overflow); another allocator error as it is.
  Status Reserve(int64_t count);
  // Frees every buffer; reserved() is 0 after.
  void Release();

  int64_t reserved() const { return reserved_; }
  template <typename T>
  T* host(size_t buffer) const { return static_cast<T*>(buffers_[buffer].host); }
  template <typename T>
  T* device(size_t buffer) const { return static_cast<T*>(buffers_[buffer].device); }

 private:
  struct Buffer {
    void* host = nullptr;
    void* device = nullptr;
  };
  // Allocates every buffer for `count` elements into `made` (all or none).
  Status AllocateAll(int64_t count, std::vector<Buffer>* made);
  void FreeAll(std::vector<Buffer>* buffers);

  DeviceAllocator* allocator_;
  std::vector<Layout> layouts_;
  std::vector<Buffer> buffers_;
  int64_t reserved_ = 0;
};

}  // namespace perserve::cuda
