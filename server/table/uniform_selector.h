// UniformSelector: every held item equally likely, O(1) an operation.
//
// The held slots form a dense sequence: Insert appends, Delete moves the last
// slot into the deleted one's place (one element at a time, in batch order).
// Draw u takes the floor(u * size)-th slot of the sequence (0-based; a
// product that rounds up to size takes the last), probability 1 / size.
// Priorities are checked and otherwise ignored. Memory: the sequence and each
// slot's place in it, 16 bytes a slot.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "table/selector.h"

namespace perserve::table {

class UniformSelector final : public Selector {
 public:
  explicit UniformSelector(int64_t capacity);

  // The sequence as it stands: Insert appends in this order and rebuilds it.
  void ListHeld(std::vector<int64_t>* slots) const override { *slots = sequence_; }
  SelectorKind kind() const override { return SelectorKind::kUniform; }
  int64_t size() const override { return static_cast<int64_t>(sequence_.size()); }

 private:
  static constexpr int64_t kNotHeld = -1;

  bool HoldsInRange(int64_t slot) const override { return place_[static_cast<size_t>(slot)] != kNotHeld; }
  Status InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status DeleteChecked(std::span<const int64_t> slots) override;
  Status SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                       std::span<double> probabilities) const override;

  std::vector<int64_t> sequence_;  // the held slots; reserved for the whole capacity
  std::vector<int64_t> place_;     // each slot's index in sequence_, or kNotHeld
};

}  // namespace perserve::table
