#include "tree/cpu/cpu_priority_tree.h"

#include <algorithm>
#include <bit>

#include <omp.h>

#include "tree/cpu/strategy_table.h"
#include "tree/tree_validation.h"

namespace perserve::tree {
namespace {

// Descents run in groups of this many, one level at a time across the group, so
// the group's cache misses overlap instead of queueing behind each other. Past
// about 16 lanes one core's outstanding-miss slots are full; 32 measured best.
constexpr size_t kDescentLanes = 32;

// A batch is split over threads only when each gets at least this many
// descents: one core saturates its miss slots at ~40 us per 512 descents on a
// 2^21 tree, and a second core halves that, but the fork/join costs a few
// microseconds, which small batches cannot repay.
constexpr int64_t kDescentsPerThread = 128;

// Descends every mass, kDescentLanes at a time, one tree level per pass across
// the group. Each step also prefetches the line its next-but-one step will read
// (both children of the chosen child sit in the 64-byte line at 4 * node).
void DescendRange(const TreeNode* nodes, int64_t capacity, std::span<const double> masses,
                  std::span<int64_t> indices) {
  const int levels = std::countr_zero(static_cast<uint64_t>(capacity));
  int64_t node[kDescentLanes];
  double mass[kDescentLanes];
  for (size_t base = 0; base < masses.size(); base += kDescentLanes) {
    const size_t lanes = std::min(kDescentLanes, masses.size() - base);
    for (size_t lane = 0; lane < lanes; ++lane) {
      node[lane] = 1;
      mass[lane] = masses[base + lane];
    }
    for (int level = 0; level < levels; ++level) {
      for (size_t lane = 0; lane < lanes; ++lane) {
        node[lane] = DescendStep(nodes, node[lane], &mass[lane]);
        if (4 * node[lane] < 2 * capacity) __builtin_prefetch(&nodes[4 * node[lane]]);
      }
    }
    for (size_t lane = 0; lane < lanes; ++lane) indices[base + lane] = node[lane] - capacity;
  }
}

}  // namespace

CpuPriorityTree::CpuPriorityTree(int64_t capacity)
    : capacity_(capacity), nodes_(capacity), sparse_scratch_(capacity) {}

Status CpuPriorityTree::Update(std::span<const int64_t> indices, std::span<const double> values) {
  PERSERVE_RETURN_IF_ERROR(ValidateUpdateBatch(indices, values, capacity_));
  const UpdateStrategy strategy =
      strategy_ == UpdateStrategy::kAuto ? AutoStrategyFor(static_cast<int64_t>(indices.size())) : strategy_;
  UpdateWith(strategy, nodes_.data(), capacity_, indices, values, &sparse_scratch_);
  return Status::Ok();
}

const StrategyTable& CpuPriorityTree::AutoTable() {
  if (auto_table_ == nullptr) auto_table_ = &StrategyTable::ForCapacity(capacity_);
  return *auto_table_;
}

UpdateStrategy CpuPriorityTree::AutoStrategyFor(int64_t k) { return AutoTable().Choose(k); }

std::string CpuPriorityTree::DescribeAutoTable() { return AutoTable().Describe(); }

Status CpuPriorityTree::FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const {
  PERSERVE_RETURN_IF_ERROR(ValidateDescentBatch(masses, indices, Total()));
  const int64_t k = static_cast<int64_t>(masses.size());
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), k / kDescentsPerThread));
  if (threads <= 1) {
    DescendRange(nodes_.data(), capacity_, masses, indices);
    return Status::Ok();
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t begin = k * omp_get_thread_num() / omp_get_num_threads();
    const int64_t end = k * (omp_get_thread_num() + 1) / omp_get_num_threads();
    DescendRange(nodes_.data(), capacity_, masses.subspan(begin, end - begin), indices.subspan(begin, end - begin));
  }
  return Status::Ok();
}

Status CpuPriorityTree::Get(std::span<const int64_t> indices, std::span<double> values) const {
  PERSERVE_RETURN_IF_ERROR(ValidateGetBatch(indices, values, capacity_));
  for (size_t j = 0; j < indices.size(); ++j) values[j] = nodes_.data()[LeafNode(capacity_, indices[j])].sum;
  return Status::Ok();
}

Status CpuPriorityTree::ReadNodes(std::span<double> sums, std::span<double> mins) const {
  const size_t slots = static_cast<size_t>(2 * capacity_);
  if (sums.size() != slots || mins.size() != slots) {
    return Status::InvalidArgument("ReadNodes needs two spans of 2 * capacity elements");
  }
  for (size_t i = 0; i < slots; ++i) {
    sums[i] = nodes_.data()[i].sum;
    mins[i] = nodes_.data()[i].min;
  }
  return Status::Ok();
}

}  // namespace perserve::tree
