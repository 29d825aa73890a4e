#include "tree/cuda/growing_buffers.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace perserve::cuda {

GrowingBuffers::GrowingBuffers(DeviceAllocator* allocator, std::vector<Layout> layouts)
    : allocator_(allocator), layouts_(std::move(layouts)), buffers_(layouts_.size()) {}

Status GrowingBuffers::Reserve(int64_t count) {
  if (count <= reserved_) return Status::Ok();
  const int64_t doubled = reserved_ > std::numeric_limits<int64_t>::max() / 2 ? count : 2 * reserved_;
  int64_t size = std::max(count, doubled);
  std::vector<Buffer> made;
  Status status = AllocateAll(size, &made);
  if (status.code() == Status::Code::kResourceExhausted && size > count) {
    size = count;  // the doubled size is a luxury; the request itself may still fit
    status = AllocateAll(size, &made);
  }
  PERSERVE_RETURN_IF_ERROR(status);
  FreeAll(&buffers_);
  buffers_ = std::move(made);
  reserved_ = size;
  return Status::Ok();
}

Status GrowingBuffers::AllocateAll(int64_t count, std::vector<Buffer>* made) {
  made->assign(layouts_.size(), Buffer{});
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const size_t element_bytes = layouts_[i].element_bytes;
    if (static_cast<uint64_t>(count) > std::numeric_limits<size_t>::max() / element_bytes) {
      FreeAll(made);
      return Status::ResourceExhausted("a buffer of " + std::to_string(count) + " elements of " +
                                       std::to_string(element_bytes) + " bytes would overflow the address space");
    }
    const Status status = allocator_->Allocate(layouts_[i].kind, static_cast<size_t>(count) * element_bytes,
                                               &(*made)[i].host, &(*made)[i].device);
    if (!status.ok()) {
      FreeAll(made);
      return status;
    }
  }
  return Status::Ok();
}

void GrowingBuffers::FreeAll(std::vector<Buffer>* buffers) {
  for (size_t i = 0; i < buffers->size(); ++i) {
    Buffer& buffer = (*buffers)[i];
    if (buffer.host != nullptr || buffer.device != nullptr) allocator_->Free(layouts_[i].kind, buffer.host, buffer.device);
    buffer = Buffer{};
  }
}

void GrowingBuffers::Release() {
  FreeAll(&buffers_);
  reserved_ = 0;
}

}  // namespace perserve::cuda
