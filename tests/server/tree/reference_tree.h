// ReferenceTree: the deliberately simple oracle every tree backend and update
// strategy is compared with bit-for-bit. One leaf at a time, one descent at a
// time, separate sum and min arrays, no shared code with the implementation
// beyond the contract in docs/design.md.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

namespace perserve::tree::testing {

class ReferenceTree {
 public:
  explicit ReferenceTree(int64_t requested_capacity)
      : capacity_(static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(requested_capacity)))),
        sums_(static_cast<size_t>(2 * capacity_), 0.0),
        mins_(static_cast<size_t>(2 * capacity_), std::numeric_limits<double>::infinity()) {}

  int64_t capacity() const { return capacity_; }
  const std::vector<double>& sums() const { return sums_; }
  const std::vector<double>& mins() const { return mins_; }
  double Total() const { return sums_[1]; }
  double Min() const { return mins_[1]; }
  double Leaf(int64_t i) const { return sums_[capacity_ + i]; }

  void Set(int64_t leaf, double value) {
    int64_t node = capacity_ + leaf;
    sums_[node] = value;
    mins_[node] = value > 0.0 ? value : std::numeric_limits<double>::infinity();  // a zero leaf: an empty slot
    for (node /= 2; node >= 1; node /= 2) {
      sums_[node] = sums_[2 * node] + sums_[2 * node + 1];
      mins_[node] = std::min(mins_[2 * node], mins_[2 * node + 1]);
    }
  }

  // docs/design.md's descent exactly: left if left_sum > mass, else subtract and go right.
  int64_t PlainDescend(double mass) const {
    int64_t node = 1;
    while (node < capacity_) {
      if (sums_[2 * node] > mass) {
        node = 2 * node;
      } else {
        mass -= sums_[2 * node];
        node = 2 * node + 1;
      }
    }
    return node - capacity_;
  }

  // The plain descent, except that it never steps into a subtree whose sum is 0
  // while its sibling's is not: it takes the sibling instead.
  int64_t GuardedDescend(double mass) const {
    int64_t node = 1;
    while (node < capacity_) {
      const int64_t left = 2 * node;
      const int64_t right = left + 1;
      const bool go_left = sums_[left] > mass;
      const bool right_empty = sums_[right] == 0.0 && sums_[left] > 0.0;
      if (go_left || right_empty) {
        node = left;
      } else {
        mass -= sums_[left];
        node = right;
      }
    }
    return node - capacity_;
  }

 private:
  int64_t capacity_;
  std::vector<double> sums_;
  std::vector<double> mins_;
};

}  // namespace perserve::tree::testing
