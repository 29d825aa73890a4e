// InsertionOrderSelector: the FIFO and LIFO selectors, O(1) an operation.
//
// A doubly linked list over the slots in insertion order: Insert appends at
// the newest end, Delete unlinks, Update changes nothing (a priority does not
// move an item in time). kFifo draws the oldest held item, kLifo the newest,
// whatever the fraction, probability 1. As a remover, kFifo is "oldest
// first". Memory: each slot's neighbours, 16 bytes a slot.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "table/selector.h"

namespace perserve::table {

class InsertionOrderSelector final : public Selector {
 public:
  // `kind` is kFifo or kLifo.
  InsertionOrderSelector(SelectorKind kind, int64_t capacity);

  // Oldest first: Insert in this order rebuilds the list.
  void ListHeld(std::vector<int64_t>* slots) const override;
  SelectorKind kind() const override { return kind_; }
  int64_t size() const override { return size_; }

 private:
  static constexpr int64_t kNone = -1;     // no neighbour on that side
  static constexpr int64_t kNotHeld = -2;  // in older_: the slot is not in the list

  bool HoldsInRange(int64_t slot) const override { return older_[static_cast<size_t>(slot)] != kNotHeld; }
  Status InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status DeleteChecked(std::span<const int64_t> slots) override;
  Status SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                       std::span<double> probabilities) const override;

  SelectorKind kind_;
  std::vector<int64_t> older_;  // the next older held slot, kNone, or kNotHeld
  std::vector<int64_t> newer_;  // the next newer held slot or kNone (meaningless when not held)
  int64_t oldest_ = kNone;
  int64_t newest_ = kNone;
  int64_t size_ = 0;
};

}  // namespace perserve::table
