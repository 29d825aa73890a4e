// PageMemory: large, uninitialised allocations backed by transparent huge
// pages where the kernel allows (2 MiB alignment + MADV_HUGEPAGE). For the
// tree's node array and the store's columns: memory touched at random or
// streamed at GB/s, where 4 KiB pages add a TLB miss to most cache misses and
// a page fault every 4 KiB on first touch.
#pragma once

#include <cstddef>
#include <memory>

namespace perserve::util {

struct PageMemoryFree {
  void operator()(std::byte* memory) const;
};
using PageMemory = std::unique_ptr<std::byte[], PageMemoryFree>;

// `bytes` uninitialised bytes (pages are backed as they are first written).
// Throws std::bad_alloc on failure.
PageMemory AllocatePageMemory(size_t bytes);

}  // namespace perserve::util
