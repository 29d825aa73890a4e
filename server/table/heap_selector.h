// HeapSelector: the max-heap and min-heap selectors, O(log n) an operation.
//
// An indexed binary heap of the held slots, each with its position in the
// heap, so Update and Delete reach any slot in O(1) and restore the order in
// O(log n). kMaxHeap draws the highest priority, kMinHeap the lowest, whatever
// the fraction, probability 1 (a draw reads the top: O(1)). Among equal
// priorities the one whose priority was set first wins: every Insert and
// Update stamps the slot with the next sequence number, and the order is by
// (priority, sequence). As a remover, kMinHeap is "lowest priority first";
// a table's remover keeps ties in insertion order (Ties::kInsertedFirst: an
// Update leaves the sequence as it was, so the older of equals leaves first).
// Memory: a 24-byte heap entry (priority, sequence, slot) and an 8-byte
// position, 32 bytes a slot.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "table/selector.h"

namespace perserve::table {

class HeapSelector final : public Selector {
 public:
  // Which of equal priorities comes first: the one whose priority was set
  // first (Insert or Update; Reverb's order, and Selector::Create's), or the
  // one inserted first (an Update keeps the item's place among its equals).
  enum class Ties { kSetFirst, kInsertedFirst };

  // `kind` is kMaxHeap or kMinHeap.
  HeapSelector(SelectorKind kind, int64_t capacity, Ties ties = Ties::kSetFirst);

  // Replaces *slots with the first min(count, size()) held slots in draw
  // order (what `count` draws, each followed by the drawn slot's Delete,
  // would take). No change. O(count log count).
  void ListFirst(int64_t count, std::vector<int64_t>* slots) const;

  // By sequence, the earliest set first: Insert in this order (with each
  // slot's last priority) gives every slot the same rank among its equals.
  void ListHeld(std::vector<int64_t>* slots) const override;
  SelectorKind kind() const override { return kind_; }
  int64_t size() const override { return static_cast<int64_t>(heap_.size()); }

 private:
  static constexpr int64_t kNotHeld = -1;

  struct Entry {
    double rank;        // the priority for kMinHeap, its negation for kMaxHeap: the smallest rank is drawn
    uint64_t sequence;  // when the priority was set; the earlier wins a tie
    int64_t slot;
  };

  static bool Before(const Entry& a, const Entry& b) {
    return a.rank < b.rank || (a.rank == b.rank && a.sequence < b.sequence);
  }
  double RankOf(double priority) const { return kind_ == SelectorKind::kMaxHeap ? -priority : priority; }
  // Moves heap_[index] up or down to its place, keeping position_ in step.
  void Restore(size_t index);
  void SiftUp(size_t index);
  void SiftDown(size_t index);
  void Place(size_t index, const Entry& entry);

  bool HoldsInRange(int64_t slot) const override { return position_[static_cast<size_t>(slot)] != kNotHeld; }
  Status InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) override;
  Status DeleteChecked(std::span<const int64_t> slots) override;
  Status SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                       std::span<double> probabilities) const override;

  SelectorKind kind_;
  Ties ties_;
  std::vector<Entry> heap_;         // heap_[0] is drawn; reserved for the whole capacity
  std::vector<int64_t> position_;  // each slot's index in heap_, or kNotHeld
  uint64_t next_sequence_ = 0;
};

}  // namespace perserve::table
