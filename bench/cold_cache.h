// Cold-cache helpers for perserve_bench_tree's Descent/cold rows: evicting a
// structure from every cache level, and the memory-level-parallelism limit of
// a batch of descents (the lines it must read, fetched with nothing waiting on
// anything). x86 only (clflush); elsewhere the cold rows report an error.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define PERSERVE_BENCH_CAN_EVICT 1
#else
#define PERSERVE_BENCH_CAN_EVICT 0
#endif

#include "tree/tree_algorithm.h"

namespace perserve::tree {

constexpr size_t kCacheLine = 64;

// Writes back and evicts every line of [data, data + bytes) from every cache
// level, so the next reads come from DRAM (~0.75 ms for 64 MiB here).
inline void EvictFromCaches(const void* data, size_t bytes) {
#if PERSERVE_BENCH_CAN_EVICT
  const auto* bytes_at = static_cast<const char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kCacheLine) _mm_clflush(bytes_at + offset);
  _mm_mfence();
#else
  (void)data;
  (void)bytes;
#endif
}

// The distinct cache lines the descents of `masses` read, pass by pass, as
// DescendBatch reads them (a step from the root's pair when the levels are
// odd, then each node's four grandchildren, one line, for two levels at a
// time): what any descent of this batch in that layout, however it is
// scheduled, must bring in.
inline std::vector<const TreeNode*> LinesDescentsRead(const TreeNode* nodes, int64_t capacity,
                                                      std::span<const double> masses) {
  std::vector<int64_t> node(masses.size(), 1);
  std::vector<double> mass(masses.begin(), masses.end());
  std::vector<const TreeNode*> lines;
  const int levels = std::countr_zero(static_cast<uint64_t>(capacity));
  for (int depth = 0; depth < levels;) {
    const bool two = (levels - depth) % 2 == 0;
    const size_t pass_start = lines.size();
    for (size_t i = 0; i < masses.size(); ++i) {
      const auto read = reinterpret_cast<uintptr_t>(&nodes[(two ? 4 : 2) * node[i]]);
      lines.push_back(reinterpret_cast<const TreeNode*>(read & ~uintptr_t{kCacheLine - 1}));
      node[i] = two ? DescendTwoLevels(nodes, node[i], &mass[i]) : DescendStep(nodes, node[i], &mass[i]);
    }
    depth += two ? 2 : 1;
    std::sort(lines.begin() + pass_start, lines.end());
    lines.erase(std::unique(lines.begin() + pass_start, lines.end()), lines.end());
  }
  return lines;
}

// Reads every line, prefetching into L2 a fixed distance ahead: one core
// fetching lines whose addresses it knows, as many in flight as it can keep
// (measured here: ~5 ns a line from DRAM at 64 ahead, against ~10 with
// demand loads or L1 prefetches, whose miss buffers are fewer). No descent of
// the same lines can be faster.
inline double FetchLines(std::span<const TreeNode* const> lines) {
  constexpr size_t kAhead = 64;
  double sum = 0.0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i + kAhead < lines.size()) __builtin_prefetch(lines[i + kAhead], 0, 2);
    sum += lines[i]->sum;
  }
  return sum;
}

}  // namespace perserve::tree
