// ClassicTrees: the classic segment trees of PER implementations (OpenAI
// Baselines, and the C++ SumSegmentTree / MinSegmentTree pair TorchRL's
// prioritized sampler keeps), the reference point perserve_bench_tree times
// the tree against in the same process. Written here from that algorithm
// (TorchRL itself cannot be installed on this machine: no PyPI), with the one
// check such a tree makes (the index in range).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace perserve::tree {

class ClassicTrees {
 public:
  // One array of 2 x capacity values per operation, root at 1, leaf i at
  // capacity + i; `capacity` a power of two.
  explicit ClassicTrees(int64_t capacity)
      : capacity_(capacity), sums_(2 * capacity, 0.0), mins_(2 * capacity, std::numeric_limits<double>::infinity()) {}

  void Fill(std::span<const double> leaves) {
    std::copy(leaves.begin(), leaves.end(), sums_.begin() + capacity_);
    std::copy(leaves.begin(), leaves.end(), mins_.begin() + capacity_);
    for (int64_t node = capacity_ - 1; node >= 1; --node) {
      sums_[node] = sums_[2 * node] + sums_[2 * node + 1];
      mins_[node] = std::min(mins_[2 * node], mins_[2 * node + 1]);
    }
  }

  // Each leaf set and walked to the root, in the sum tree, then in the min tree.
  bool Update(std::span<const int64_t> indices, std::span<const double> values) {
    return Set(&sums_, indices, values, [](double a, double b) { return a + b; }) &&
           Set(&mins_, indices, values, [](double a, double b) { return std::min(a, b); });
  }

  // TorchRL's batched ScanLowerBound: one descent after another down the sum
  // tree, right when the mass exceeds the left sum (subtracting it); a mass
  // past the total gives `capacity`. Ties go the other way from perserve's
  // rule, which changes no timing.
  void FindPrefixSum(std::span<const double> masses, std::span<int64_t> leaves) const {
    const double* sums = sums_.data();
    for (size_t i = 0; i < masses.size(); ++i) {
      if (masses[i] > sums[1]) {
        leaves[i] = capacity_;
        continue;
      }
      double mass = masses[i];
      int64_t node = 1;
      while (node < capacity_) {
        node <<= 1;
        if (mass > sums[node]) {
          mass -= sums[node];
          node |= 1;
        }
      }
      leaves[i] = node ^ capacity_;
    }
  }

  double Total() const { return sums_[1]; }
  // The sum tree, all a descent reads.
  std::span<const double> sums() const { return sums_; }

 private:
  template <typename Op>
  bool Set(std::vector<double>* tree, std::span<const int64_t> indices, std::span<const double> values, Op op) {
    double* t = tree->data();
    for (size_t j = 0; j < indices.size(); ++j) {
      if (indices[j] < 0 || indices[j] >= capacity_) return false;
      int64_t node = indices[j] + capacity_;
      t[node] = values[j];
      for (node >>= 1; node >= 1; node >>= 1) t[node] = op(t[2 * node], t[2 * node + 1]);
    }
    return true;
  }

  int64_t capacity_;
  std::vector<double> sums_, mins_;
};

}  // namespace perserve::tree
