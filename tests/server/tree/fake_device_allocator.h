// A DeviceAllocator over plain host memory, for host tests of the CUDA
// tree's buffer handling: it hands out the same address as "host" and
// "device", keeps count of what is live, and runs out of memory on demand
// (a byte budget) or fails with any Status once.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "tree/cuda/device_allocator.h"

namespace perserve::cuda::testing {

class FakeDeviceAllocator final : public DeviceAllocator {
 public:
  ~FakeDeviceAllocator() override {
    for (auto& [pointer, bytes] : live_) std::free(pointer);
  }

  Status Allocate(MemoryKind kind, size_t bytes, void** host, void** device) override {
    *host = *device = nullptr;
    requests_.push_back(bytes);
    if (fail_next_) {
      const Status failure = *fail_next_;
      fail_next_.reset();
      return failure;
    }
    if (bytes > budget_bytes_ - live_bytes_) return Status::ResourceExhausted("fake: out of memory");
    void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    live_[memory] = bytes;
    live_bytes_ += bytes;
    *device = memory;
    if (kind != MemoryKind::kDevice) *host = memory;
    return Status::Ok();
  }

  void Free(MemoryKind kind, void* host, void* device) override {
    void* memory = kind == MemoryKind::kDevice ? device : host;
    auto it = live_.find(memory);
    if (it == live_.end()) {
      ++bad_frees_;
      return;
    }
    live_bytes_ -= it->second;
    live_.erase(it);
    std::free(memory);
  }

  // Allocations fail (kResourceExhausted) once live bytes would pass this.
  void set_budget_bytes(size_t bytes) { budget_bytes_ = bytes; }
  void FailNext(Status failure) { fail_next_ = std::move(failure); }

  size_t live_allocations() const { return live_.size(); }
  size_t live_bytes() const { return live_bytes_; }
  const std::vector<size_t>& requests() const { return requests_; }  // every Allocate's bytes, in order
  int bad_frees() const { return bad_frees_; }                       // frees of unknown addresses

 private:
  size_t budget_bytes_ = std::numeric_limits<size_t>::max();
  size_t live_bytes_ = 0;
  std::map<void*, size_t> live_;
  std::vector<size_t> requests_;
  std::optional<Status> fail_next_;
  int bad_frees_ = 0;
};

}  // namespace perserve::cuda::testing
