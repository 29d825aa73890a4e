#include "util/page_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace perserve::util {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void PageMemoryFree::operator()(std::byte* memory) const { std::free(memory); }

PageMemory AllocatePageMemory(size_t bytes) {
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* memory = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (memory == nullptr) throw std::bad_alloc();
  if (alignment == kHugePage) madvise(memory, rounded, MADV_HUGEPAGE);  // advisory; failure is harmless
  return PageMemory(static_cast<std::byte*>(memory));
}

}  // namespace perserve::util
