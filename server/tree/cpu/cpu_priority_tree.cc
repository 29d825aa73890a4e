#include "tree/cpu/cpu_priority_tree.h"

#include <fmt/format.h>

#include "tree/cpu/batched_descent.h"
#include "tree/strategy_table.h"
#include "tree/tree_validation.h"

namespace perserve::tree {
namespace {

// SplitMix64's output function: a bijective 64-bit mixer.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

CpuPriorityTree::CpuPriorityTree(int64_t capacity)
    : capacity_(capacity), nodes_(capacity), sparse_scratch_(capacity) {}

Status CpuPriorityTree::Update(std::span<const int64_t> indices, std::span<const double> values) {
  PERSERVE_RETURN_IF_ERROR(ValidateUpdateBatch(indices, values, capacity_));
  PERSERVE_RETURN_IF_ERROR(ValidateTotalStaysBounded(*this, indices, values));
  UpdateValidated(indices, values);
  return Status::Ok();
}

Status CpuPriorityTree::UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                                           double alpha) {
  PERSERVE_RETURN_IF_ERROR(ValidateExponentBatch(indices, priorities, alpha, capacity_));
  PERSERVE_RETURN_IF_ERROR(ValidateTotalStaysBounded(*this, indices, priorities, alpha));
  leaves_.resize(priorities.size());
  for (size_t j = 0; j < priorities.size(); ++j) leaves_[j] = LeafFromPriority(priorities[j], alpha);
  UpdateValidated(indices, leaves_);
  return Status::Ok();
}

void CpuPriorityTree::UpdateValidated(std::span<const int64_t> indices, std::span<const double> values) {
  if (indices.empty()) return;
  const UpdateStrategy strategy =
      strategy_ == UpdateStrategy::kAuto ? AutoStrategyFor(static_cast<int64_t>(indices.size())) : strategy_;
  ++updates_run_with_[static_cast<size_t>(strategy)];
  UpdateWith(strategy, nodes_.data(), capacity_, indices, values, &sparse_scratch_);
}

const StrategyTable& CpuPriorityTree::AutoTable() {
  if (auto_table_ != nullptr) return *auto_table_;
  const int64_t capacity = capacity_;
  auto_table_ = StrategyTable::Cached("cpu", capacity, [capacity]() -> std::optional<StrategyTable> {
    NodeBuffer nodes(capacity);
    SparseScratch scratch(capacity);
    // Cheap-at-small-batches first, so the rebuild's O(n) sweep can be ruled out without running.
    constexpr UpdateStrategy kCandidates[] = {UpdateStrategy::kSparse, UpdateStrategy::kPerElement,
                                              UpdateStrategy::kRebuild};
    return StrategyTable::Measure(capacity, kCandidates,
                                  [&](UpdateStrategy strategy, std::span<const int64_t> indices,
                                      std::span<const double> values) {
                                    UpdateWith(strategy, nodes.data(), capacity, indices, values, &scratch);
                                    return Status::Ok();
                                  });
  });
  return *auto_table_;
}

UpdateStrategy CpuPriorityTree::AutoStrategyFor(int64_t k) { return AutoTable().Choose(k); }

std::string CpuPriorityTree::DescribeAutoTable() { return AutoTable().Describe(); }

// One thread: a second core halves a 512-descent batch when its OpenMP worker
// is spinning, but a worker that has gone to sleep (OMP_WAIT_POLICY=passive,
// or idle beyond the spin period, as between a server's sample requests)
// costs more to wake than the whole batch takes on one core (116-144 us against ~30 us at 2^21).
Status CpuPriorityTree::FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const {
  PERSERVE_RETURN_IF_ERROR(ValidateDescentBatch(masses, indices, Total()));
  DescendBatch(nodes_.data(), capacity_, masses, indices);
  return Status::Ok();
}

Status CpuPriorityTree::Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                               std::span<double> values) const {
  const double total = Total();
  PERSERVE_RETURN_IF_ERROR(ValidateSampleBatch(indices, values, total));
  // A SplitMix64 stream that starts where (seed, counter) says: draw i is a
  // function of (seed, counter, i) alone, as with the CUDA backend's Philox.
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  const uint64_t start = Mix(seed + Mix(counter + kGolden));
  const int64_t batch = static_cast<int64_t>(indices.size());
  masses_.resize(indices.size());
  for (int64_t i = 0; i < batch; ++i) {
    masses_[i] = StratifiedMass(i, UnitFromBits(Mix(start + static_cast<uint64_t>(i + 1) * kGolden)), total, batch);
  }
  DescendBatch(nodes_.data(), capacity_, masses_, indices);
  GatherLeaves(indices, values);
  return Status::Ok();
}

Status CpuPriorityTree::Get(std::span<const int64_t> indices, std::span<double> values) const {
  PERSERVE_RETURN_IF_ERROR(ValidateGetBatch(indices, values, capacity_));
  GatherLeaves(indices, values);
  return Status::Ok();
}

Status CpuPriorityTree::ReadLeaves(int64_t first, std::span<double> values) const {
  const int64_t count = static_cast<int64_t>(values.size());
  if (first < 0 || count > capacity_ - first) {
    return Status::OutOfRange(fmt::format("leaves {} .. {} are outside [0, {})", first, first + count, capacity_));
  }
  const TreeNode* leaves = nodes_.data() + LeafNode(capacity_, first);
  for (int64_t j = 0; j < count; ++j) values[j] = leaves[j].sum;
  return Status::Ok();
}

void CpuPriorityTree::GatherLeaves(std::span<const int64_t> indices, std::span<double> values) const {
  for (size_t j = 0; j < indices.size(); ++j) values[j] = nodes_.data()[LeafNode(capacity_, indices[j])].sum;
}

Status CpuPriorityTree::ReadNodes(std::span<double> sums, std::span<double> mins) const {
  PERSERVE_RETURN_IF_ERROR(ValidateNodeSpans(sums, mins, capacity_));
  SplitNodes(nodes_.data(), 2 * capacity_, sums.data(), mins.data());
  return Status::Ok();
}

}  // namespace perserve::tree
