// The CUDA tree's kernels: thin __global__ shells around tree_algorithm.h's
// per-element steps, one thread per element (or node). cuda_priority_tree.cu
// chooses launch shapes and the order of launches; every kernel here is safe
// for any grid size (grid-stride loops) unless it says "one block".
#pragma once

#include <cub/block/block_radix_sort.cuh>
#include <curand_kernel.h>

#include <cstdint>

#include "tree/tree_algorithm.h"

namespace perserve::tree::kernels {

// Batches up to this size are sorted and applied by one block (SmallBatch).
constexpr int kBlockThreads = 1024;
constexpr int kBlockItems = 2;
constexpr int64_t kBlockBatch = int64_t{kBlockThreads} * kBlockItems;
// The top levels, up to this many nodes wide, are recomputed by one block
// (TopLevels), with __syncthreads between levels instead of a launch each.
constexpr int64_t kTopLevelNodes = kBlockThreads;

#define PERSERVE_GRID_STRIDE(i, count)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ inline double LeafValue(double value, bool exponent, double alpha) {
  return exponent ? LeafFromPriority(value, alpha) : value;
}

// Every node {sum 0, min +inf}: an empty tree.
__global__ void Fill(TreeNode* d_nodes, int64_t slots) {
  PERSERVE_GRID_STRIDE(i, slots) d_nodes[i] = TreeNode{0.0, __longlong_as_double(0x7ff0000000000000LL)};
}

// One block, batches of up to kBlockBatch: sorts (leaf, value) stably by leaf,
// writes the last of each run (p^alpha first when `exponent`), and when
// `sparse` recomputes the distinct ancestors level by level to the root and
// publishes the root to *d_root_out. Padding sorts after every real leaf
// (key `capacity`, one bit above any leaf index). d_indices and d_values must
// be 16-byte aligned (the staging's layout sees to it).
__global__ void __launch_bounds__(kBlockThreads)
    SmallBatch(const int64_t* d_indices, const double* d_values, int64_t count, bool exponent, double alpha,
               bool sparse, TreeNode* d_nodes, int64_t capacity, int levels, TreeNode* d_root_out) {
  using Sort = cub::BlockRadixSort<int64_t, kBlockThreads, kBlockItems, double>;
  __shared__ union {
    typename Sort::TempStorage sort;
    int64_t sorted_leaves[kBlockBatch];
  } shared;
  // Blocked arrangement: thread t holds items 2t and 2t + 1, read with one
  // 16-byte load per array, so each warp instruction uses all 512 bytes it
  // touches of the mapped host memory (two 8-byte loads strided by 16 bytes
  // used half of them each).
  static_assert(kBlockItems == 2, "the loads below read two items per thread");
  int64_t leaves[kBlockItems];
  double values[kBlockItems];
  const int64_t first = static_cast<int64_t>(threadIdx.x) * kBlockItems;
  if (first + 1 < count) {
    const longlong2 leaf_pair = reinterpret_cast<const longlong2*>(d_indices)[threadIdx.x];
    const double2 value_pair = reinterpret_cast<const double2*>(d_values)[threadIdx.x];
    leaves[0] = leaf_pair.x;
    leaves[1] = leaf_pair.y;
    values[0] = value_pair.x;
    values[1] = value_pair.y;
  } else {
    for (int item = 0; item < kBlockItems; ++item) {
      const int64_t j = first + item;
      leaves[item] = j < count ? d_indices[j] : capacity;
      values[item] = j < count ? d_values[j] : 0.0;
    }
  }
  Sort(shared.sort).Sort(leaves, values, 0, levels + 1);
  __syncthreads();  // the sort's storage becomes the sorted leaves
  for (int item = 0; item < kBlockItems; ++item) {
    shared.sorted_leaves[threadIdx.x * kBlockItems + item] = leaves[item];
  }
  __syncthreads();
  for (int item = 0; item < kBlockItems; ++item) {
    const int64_t j = static_cast<int64_t>(threadIdx.x) * kBlockItems + item;
    if (j < count && LastOfRun(shared.sorted_leaves, count, j)) {
      WriteLeaf(d_nodes, capacity, leaves[item], LeafValue(values[item], exponent, alpha));
    }
  }
  if (!sparse) return;  // uniform across the block
  __syncthreads();      // global writes before it are visible to the whole block after it
  for (int height = 1; height <= levels; ++height) {
    for (int item = 0; item < kBlockItems; ++item) {
      const int64_t j = static_cast<int64_t>(threadIdx.x) * kBlockItems + item;
      if (j < count) RecomputeAncestorOnce(d_nodes, capacity, shared.sorted_leaves, j, height);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *d_root_out = d_nodes[1];
}

// Larger batches, after a device-wide stable sort by leaf: the last of each run writes.
__global__ void WriteLastOfRuns(const int64_t* d_sorted_leaves, const double* d_sorted_values, int64_t count,
                                bool exponent, double alpha, TreeNode* d_nodes, int64_t capacity) {
  PERSERVE_GRID_STRIDE(j, count) {
    if (LastOfRun(d_sorted_leaves, count, j)) {
      WriteLeaf(d_nodes, capacity, d_sorted_leaves[j], LeafValue(d_sorted_values[j], exponent, alpha));
    }
  }
}

// One level of the sparse update: each distinct ancestor at `height` once.
__global__ void SparseLevel(TreeNode* d_nodes, int64_t capacity, const int64_t* d_sorted_leaves, int64_t count,
                            int height) {
  PERSERVE_GRID_STRIDE(j, count) RecomputeAncestorOnce(d_nodes, capacity, d_sorted_leaves, j, height);
}

// One level of the rebuild: every node in [first, 2 * first).
__global__ void RebuildLevel(TreeNode* d_nodes, int64_t first) {
  PERSERVE_GRID_STRIDE(i, first) RecomputeNode(d_nodes, first + i);
}

// One block: every node of the levels starting at `top_first`, top_first / 2,
// ..., 1 (none when top_first is 0), bottom-up, then publishes the root.
__global__ void __launch_bounds__(kBlockThreads) TopLevels(TreeNode* d_nodes, int64_t top_first,
                                                           TreeNode* d_root_out) {
  for (int64_t first = top_first; first >= 1; first >>= 1) {
    for (int64_t node = first + threadIdx.x; node < 2 * first; node += blockDim.x) RecomputeNode(d_nodes, node);
    __syncthreads();
  }
  if (threadIdx.x == 0) *d_root_out = d_nodes[1];
}

__device__ inline int64_t DescendFrom(const TreeNode* d_nodes, int levels, double mass) {
  int64_t node = 1;
  for (int level = 0; level < levels; ++level) node = DescendStep(d_nodes, node, &mass);
  return node;
}

// One descent per thread for host-given masses.
__global__ void Descend(const TreeNode* d_nodes, int64_t capacity, int levels, const double* d_masses,
                        int64_t count, int64_t* d_indices_out) {
  PERSERVE_GRID_STRIDE(i, count) d_indices_out[i] = DescendFrom(d_nodes, levels, d_masses[i]) - capacity;
}

// Stratified sampling, one draw per thread: u_i from Philox4_32_10 keyed by
// `seed`, subsequence `counter`, offset 4 i (one 128-bit block per draw, so
// no two (counter, i) share one). For Philox, curand_init costs the same for
// any subsequence and offset: it adds them to the 128-bit counter (no
// stepping through the sequence) and computes a Philox block (ten rounds)
// after each of the two skips, of which only the last is used; small beside
// the descent's chain of dependent loads, and it keeps to the documented
// device API.
__global__ void Sample(const TreeNode* d_nodes, int64_t capacity, int levels, uint64_t seed, uint64_t counter,
                       int64_t count, int64_t* d_indices_out, double* d_values_out) {
  const double total = d_nodes[1].sum;
  PERSERVE_GRID_STRIDE(i, count) {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, counter, 4 * static_cast<unsigned long long>(i), &state);
    const double unit = curand_uniform2_double(&state).x;
    const int64_t node = DescendFrom(d_nodes, levels, StratifiedMass(i, unit, total, count));
    d_indices_out[i] = node - capacity;
    d_values_out[i] = d_nodes[node].sum;
  }
}

__global__ void GatherLeaves(const TreeNode* d_nodes, int64_t capacity, const int64_t* d_indices, int64_t count,
                             double* d_values_out) {
  PERSERVE_GRID_STRIDE(i, count) d_values_out[i] = d_nodes[LeafNode(capacity, d_indices[i])].sum;
}

#undef PERSERVE_GRID_STRIDE

}  // namespace perserve::tree::kernels
