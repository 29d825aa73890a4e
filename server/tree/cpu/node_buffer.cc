#include "tree/cpu/node_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <limits>
#include <new>

namespace perserve::tree {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

NodeBuffer::NodeBuffer(int64_t capacity) : size_(2 * capacity) {
  const size_t bytes = static_cast<size_t>(size_) * sizeof(TreeNode);
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  bytes_ = RoundUp(bytes, alignment);
  void* memory = std::aligned_alloc(alignment, bytes_);
  if (memory == nullptr) throw std::bad_alloc();
  if (alignment == kHugePage) madvise(memory, bytes_, MADV_HUGEPAGE);  // advisory; failure is harmless
  nodes_ = static_cast<TreeNode*>(memory);
  const double infinity = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < size_; ++i) nodes_[i] = TreeNode{0.0, infinity};
}

NodeBuffer::~NodeBuffer() { std::free(nodes_); }

}  // namespace perserve::tree
