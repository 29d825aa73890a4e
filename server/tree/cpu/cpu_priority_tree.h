// CpuPriorityTree: the PriorityTree backend in host memory.
//
// The per-element steps come from tree_algorithm.h; this class adds the batch
// loops, the update strategies (update_strategies.h) and the measured "auto"
// choice among them (strategy_table.h). Descents go through DescendBatch
// (batched_descent.h), many paths a level at a time, so their cache misses
// overlap.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tree/cpu/node_buffer.h"
#include "tree/cpu/update_strategies.h"
#include "tree/priority_tree.h"

namespace perserve::tree {

class StrategyTable;

class CpuPriorityTree final : public PriorityTree {
 public:
  // `capacity` must already be a power of two in [1, kMaxCapacity].
  explicit CpuPriorityTree(int64_t capacity);

  int64_t capacity() const override { return capacity_; }
  std::string_view device_name() const override { return "cpu"; }
  void SetStrategy(UpdateStrategy strategy) override { strategy_ = strategy; }
  UpdateStrategy strategy() const override { return strategy_; }
  void PrepareAuto() override { AutoTable(); }

  Status Update(std::span<const int64_t> indices, std::span<const double> values) override;
  Status UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                            double alpha) override;
  // The generator: SplitMix64, draw i keyed by (seed, counter, i).
  Status Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                std::span<double> values) const override;
  Status FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const override;
  Status Get(std::span<const int64_t> indices, std::span<double> values) const override;
  Status ReadLeaves(int64_t first, std::span<double> values) const override;
  double Total() const override { return nodes_.data()[1].sum; }
  double Min() const override { return nodes_.data()[1].min; }
  Status ReadNodes(std::span<double> sums, std::span<double> mins) const override;

  // The raw node array (2 * capacity slots), for benchmarks of the bare algorithm.
  const TreeNode* nodes() const { return nodes_.data(); }

  // The strategy kAuto uses for a batch of k (measures the table on first use).
  UpdateStrategy AutoStrategyFor(int64_t k);
  // The measured crossover table, as text (measures it on first use).
  std::string DescribeAutoTable() override;
  // How many updates ran `strategy` (never kAuto: the one it chose): what an
  // update actually does, for tests of the dispatch.
  int64_t updates_run_with(UpdateStrategy strategy) const { return updates_run_with_[static_cast<size_t>(strategy)]; }

 private:
  const StrategyTable& AutoTable();
  void UpdateValidated(std::span<const int64_t> indices, std::span<const double> values);
  // values[j] = leaf indices[j]'s value, for indices already validated.
  void GatherLeaves(std::span<const int64_t> indices, std::span<double> values) const;

  int64_t capacity_;
  UpdateStrategy strategy_ = UpdateStrategy::kAuto;
  NodeBuffer nodes_;
  SparseScratch sparse_scratch_;
  const StrategyTable* auto_table_ = nullptr;
  std::array<int64_t, 4> updates_run_with_{};  // by UpdateStrategy
  // Scratch reused across calls, so a warmed-up tree does not allocate.
  std::vector<double> leaves_;
  mutable std::vector<double> masses_;
};

}  // namespace perserve::tree
