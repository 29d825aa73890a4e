// CudaPriorityTree: the PriorityTree backend on a CUDA device.
//
// The sum and min nodes (doubles, the same interleaved TreeNode layout as the
// CPU) live in device memory for the tree's lifetime, and every kernel runs
// tree_algorithm.h's per-element steps (tree_kernels.cuh), so both backends
// build bit-identical trees and descend them identically.
//
// - Update: the batch is sorted stably by leaf, the last of each run of a
//   repeated leaf writes it (the last value wins, deterministically), then
//   either the sparse update (each distinct ancestor once, level by level) or
//   the rebuild (every node, level by level) runs; "auto" picks per batch size
//   from crossovers measured on this device (StrategyTable); "per_element"
//   runs as sparse, since leaf-to-root walks on many threads would collide.
//   Batches up to 2048 are sorted and applied by one block in one kernel.
// - Sample: masses from Philox, descents and leaf values in one kernel.
// - Total() and Min(): the root, which the last kernel of every update writes
//   to mapped pinned host memory: a host read, no CUDA call.
// - Host staging is mapped pinned memory that kernels read and write in place,
//   allocated at creation for batches up to 2^16 and grown once for a larger
//   batch; nothing on the update or sample path allocates otherwise. One
//   stream, owned by the tree; every call waits for its own work, so the
//   interface stays synchronous.
//
// Thread safety: none (as PriorityTree); also not across devices: the tree
// uses the device current when it was created.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tree/priority_tree.h"
#include "tree/tree_algorithm.h"

struct CUstream_st;

namespace perserve::tree {

class StrategyTable;

class CudaPriorityTree final : public PriorityTree {
 public:
  // `capacity` must already be a power of two in [1, kMaxCapacity].
  static Status Create(int64_t capacity, std::unique_ptr<CudaPriorityTree>* tree);
  ~CudaPriorityTree() override;
  CudaPriorityTree(const CudaPriorityTree&) = delete;
  CudaPriorityTree& operator=(const CudaPriorityTree&) = delete;

  int64_t capacity() const override { return capacity_; }
  std::string_view device_name() const override { return "cuda"; }
  void SetStrategy(UpdateStrategy strategy) override { strategy_ = strategy; }
  UpdateStrategy strategy() const override { return strategy_; }
  void PrepareAuto() override { AutoTable(); }

  Status Update(std::span<const int64_t> indices, std::span<const double> values) override;
  Status UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                            double alpha) override;
  Status FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const override;
  Status Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                std::span<double> values) const override;
  Status Get(std::span<const int64_t> indices, std::span<double> values) const override;
  double Total() const override { return static_cast<volatile const TreeNode*>(h_root_)->sum; }
  double Min() const override { return static_cast<volatile const TreeNode*>(h_root_)->min; }
  Status ReadNodes(std::span<double> sums, std::span<double> mins) const override;

  // The measured crossover table, as text (measures it on first use).
  std::string DescribeAutoTable() override;

 private:
  explicit CudaPriorityTree(int64_t capacity);
  Status Allocate();
  // Makes the staging hold batches of `count` (grows, never shrinks).
  Status Reserve(int64_t count) const;
  // The same for the device sort's buffers (updates above one block's batch).
  Status ReserveSort(int64_t count);
  template <typename Body>
  Status OnDevice(const char* what, Body body) const;
  // Validated batch in, `exponent`: the values are priorities for p^alpha.
  // Queues the work; the caller (OnDevice) waits for it.
  Status UpdateOnDevice(UpdateStrategy strategy, std::span<const int64_t> indices, std::span<const double> values,
                        bool exponent, double alpha);
  // Recomputes every internal node from the leaves, level by level.
  Status RebuildInternalNodes();
  // Waits for the stream and reports the first error of `what`.
  Status Finish(const char* what) const;
  UpdateStrategy Resolve(int64_t count);
  const StrategyTable* AutoTable();

  int64_t capacity_;
  int levels_;
  UpdateStrategy strategy_ = UpdateStrategy::kAuto;
  const StrategyTable* auto_table_ = nullptr;
  bool auto_failed_ = false;

  CUstream_st* stream_ = nullptr;
  TreeNode* d_nodes_ = nullptr;
  TreeNode* h_root_ = nullptr;  // mapped pinned: written by the device, read by Total() and Min()
  TreeNode* d_root_ = nullptr;  // the same memory, as the device sees it

  // Staging and scratch, sized for `reserved_` elements (mutable: the const
  // queries stage their inputs and outputs here too).
  mutable int64_t reserved_ = 0;
  mutable std::byte* h_in_ = nullptr;   // mapped pinned, write-combined: inputs (indices|masses, then values)
  mutable std::byte* d_in_ = nullptr;
  mutable std::byte* h_out_ = nullptr;  // mapped pinned: outputs (indices, then values)
  mutable std::byte* d_out_ = nullptr;
  int64_t sort_reserved_ = 0;
  int64_t* d_keys_[2] = {nullptr, nullptr};  // device sort double buffers for large batches
  double* d_values_[2] = {nullptr, nullptr};
  void* d_sort_temp_ = nullptr;
  size_t sort_temp_bytes_ = 0;
  // Set by the first CUDA error; every later operation then fails with it.
  mutable std::string failure_;
};

}  // namespace perserve::tree
