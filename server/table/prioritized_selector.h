// PrioritizedSelector: draws proportionally to priority^alpha, on today's
// sum tree (tree::PriorityTree), one leaf a slot.
//
// Draw u lands on the leaf at mass u * Total(): the tree's descent
// (FindPrefixSum), which never lands on an empty leaf; its probability is
// leaf / Total(). A held slot's leaf is never 0 (LeafFromPriority clamps a
// power below 2^-1022 up to it), an unheld one's always is. Memory: the tree
// (32 bytes a leaf, over the capacity rounded up to a power of two) and a
// held flag, 1 byte a slot.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "table/selector.h"
#include "tree/priority_tree.h"

namespace perserve::table {

class PrioritizedSelector final : public Selector {
 public:
  // Options as Selector::Create checked them; the tree's own failures (no
  // CUDA device for kCuda, no memory) come back as its status.
  static Status Create(const SelectorOptions& options, std::unique_ptr<Selector>* selector);

  void ListHeld(std::vector<int64_t>* slots) const override;
  SelectorKind kind() const override { return SelectorKind::kPrioritized; }
  int64_t size() const override { return size_; }

 private:
  PrioritizedSelector(const SelectorOptions& options, std::unique_ptr<tree::PriorityTree> tree);

  bool HoldsInRange(int64_t slot) const override { return held_[static_cast<size_t>(slot)] != 0; }
  Status InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status DeleteChecked(std::span<const int64_t> slots) override;
  Status SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                       std::span<double> probabilities) const override;

  double alpha_;
  std::unique_ptr<tree::PriorityTree> tree_;
  std::vector<uint8_t> held_;  // 1 where the slot is held
  int64_t size_ = 0;
  std::vector<double> zeros_;  // a Delete's leaf values
};

}  // namespace perserve::table
