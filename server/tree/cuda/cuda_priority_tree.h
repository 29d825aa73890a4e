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
//   to mapped pinned host memory: a host read, no CUDA call. NaN once the
//   tree has failed (below), so a stale or half-updated root is never read.
// - Host staging is mapped pinned memory that kernels read and write in place,
//   allocated at creation for batches up to 2^16 and grown (GrowingBuffers)
//   for a larger batch; nothing on the update or sample path allocates
//   otherwise. One stream, owned by the tree; every call waits for its own
//   work, so the interface stays synchronous.
// - Errors (OperationLatch): every public method asks the latch first, before
//   validating or resolving "auto". Memory that cannot be had for staging or
//   sort buffers is kResourceExhausted, found before any work is queued, and
//   leaves the tree intact and usable; an error after work was queued leaves
//   the tree refusing every later call (kInternal, naming the first error).
// - Device: the tree remembers the device current at its creation and makes
//   it current for each call (restoring the caller's afterwards), so any
//   thread may call it whatever device that thread has selected.
//
// Thread safety: none (as PriorityTree).
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <string>

#include "tree/cuda/growing_buffers.h"
#include "tree/cuda/operation_latch.h"
#include "tree/priority_tree.h"
#include "tree/tree_algorithm.h"

struct CUstream_st;

namespace perserve::tree {

class StrategyTable;

class CudaPriorityTree final : public PriorityTree {
 public:
  // `capacity` must already be a power of two in [1, kMaxCapacity]. On the
  // calling thread's current device.
  static Status Create(int64_t capacity, std::unique_ptr<CudaPriorityTree>* tree);
  // Test only: a tree object with no device memory, no stream and no device
  // of its own, whose buffers come from `allocator` (null: CUDA's), so host
  // tests can drive the latch and allocation paths without a GPU. Its kernels
  // would run on null pointers: use it where no device is usable, or closed.
  static std::unique_ptr<CudaPriorityTree> CreateWithoutDeviceForTesting(int64_t capacity,
                                                                         cuda::DeviceAllocator* allocator);
  // Test only: closes the latch as a failed operation would.
  void CloseLatchForTesting(const Status& cause) { latch_.Close(cause); }
  bool failed() const { return latch_.closed(); }
  ~CudaPriorityTree() override;
  CudaPriorityTree(const CudaPriorityTree&) = delete;
  CudaPriorityTree& operator=(const CudaPriorityTree&) = delete;

  int64_t capacity() const override { return capacity_; }
  std::string_view device_name() const override { return "cuda"; }
  void SetStrategy(UpdateStrategy strategy) override { strategy_ = strategy; }
  UpdateStrategy strategy() const override { return strategy_; }
  void PrepareAuto() override {
    if (!latch_.closed()) AutoTable();
  }

  Status Update(std::span<const int64_t> indices, std::span<const double> values) override;
  Status UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                            double alpha) override;
  Status FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const override;
  Status Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                std::span<double> values) const override;
  Status Get(std::span<const int64_t> indices, std::span<double> values) const override;
  // NaN once the tree has failed.
  double Total() const override {
    return latch_.closed() ? std::numeric_limits<double>::quiet_NaN()
                           : static_cast<volatile const TreeNode*>(h_root_)->sum;
  }
  double Min() const override {
    return latch_.closed() ? std::numeric_limits<double>::quiet_NaN()
                           : static_cast<volatile const TreeNode*>(h_root_)->min;
  }
  Status ReadNodes(std::span<double> sums, std::span<double> mins) const override;

  // The measured crossover table, as text (measures it on first use).
  std::string DescribeAutoTable() override;

 private:
  CudaPriorityTree(int64_t capacity, cuda::DeviceAllocator* allocator);
  Status Allocate();
  // Makes the staging hold batches of `count` (grows, never shrinks).
  Status ReserveStaging(int64_t count) const;
  // One operation on the tree's device under the latch's rule: `prepare`
  // allocates and queues nothing, `queue` queues the work; then it waits.
  template <typename Prepare, typename Queue>
  Status OnDevice(const char* what, Prepare prepare, Queue queue) const;
  // An update's prepare phase: staging, and for batches above one block the
  // device sort's buffers and temporary storage.
  Status PrepareUpdate(int64_t count);
  // Validated batch in, `exponent`: the values are priorities for p^alpha.
  // Queues the work (PrepareUpdate(count) has run); OnDevice waits for it.
  Status QueueUpdate(UpdateStrategy strategy, std::span<const int64_t> indices, std::span<const double> values,
                     bool exponent, double alpha);
  // Recomputes every internal node from the leaves, level by level.
  Status RebuildInternalNodes();
  // Waits for the stream and reports the first error of `what`.
  Status Finish(const char* what) const;
  UpdateStrategy Resolve(int64_t count);
  const StrategyTable* AutoTable();

  int64_t capacity_;
  int levels_;
  int device_ = -1;          // the device current at creation; -1: none (the test-only object)
  std::string device_type_;  // "cuda:<name> (<SMs> SMs, sm_<cc>)": the calibration table's key
  UpdateStrategy strategy_ = UpdateStrategy::kAuto;
  const StrategyTable* auto_table_ = nullptr;
  bool auto_failed_ = false;

  CUstream_st* stream_ = nullptr;
  TreeNode* d_nodes_ = nullptr;
  TreeNode* h_root_ = nullptr;  // mapped pinned: written by the device, read by Total() and Min()
  TreeNode* d_root_ = nullptr;  // the same memory, as the device sees it

  // Staging (mutable: the const queries stage their inputs and outputs here
  // too), 16 bytes an element in each buffer: kStagingIn, mapped pinned and
  // write-combined, holds the inputs (indices or masses, then values from
  // InputValuesOffset); kStagingOut, mapped pinned, the outputs (indices,
  // then values).
  mutable cuda::GrowingBuffers staging_;
  // The device sort's double buffers (kSortKeys0 ...), for updates above one
  // block's batch, and its temporary storage (bytes).
  cuda::GrowingBuffers sort_;
  cuda::GrowingBuffers sort_temp_;
  mutable cuda::OperationLatch latch_;
};

}  // namespace perserve::tree
