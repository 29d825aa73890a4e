// ReferenceSelector: the selectors' contract (server/table/selector.h) spelled
// naively over std::vector and std::map, O(n) a draw, for the tests to check
// the real selectors against op by op. It takes only valid calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "table/selector.h"
#include "tree/tree_algorithm.h"

namespace perserve::table::testing {

// The interval of masses that lands on a prioritized draw's slot.
struct MassInterval {
  long double begin = 0;
  long double end = 0;
};

class ReferenceSelector {
 public:
  ReferenceSelector(SelectorKind kind, double alpha) : kind_(kind), alpha_(alpha) {}

  void Insert(const std::vector<int64_t>& slots, const std::vector<double>& priorities) {
    for (size_t j = 0; j < slots.size(); ++j) {
      items_[slots[j]] = Item{priorities[j], tree::LeafFromPriority(priorities[j], alpha_), next_sequence_++};
      insertion_order_.push_back(slots[j]);
      uniform_sequence_.push_back(slots[j]);
    }
  }

  void Update(const std::vector<int64_t>& slots, const std::vector<double>& priorities) {
    for (size_t j = 0; j < slots.size(); ++j) {
      items_[slots[j]] = Item{priorities[j], tree::LeafFromPriority(priorities[j], alpha_), next_sequence_++};
    }
  }

  void Delete(const std::vector<int64_t>& slots) {
    for (const int64_t slot : slots) {
      items_.erase(slot);
      insertion_order_.erase(std::find(insertion_order_.begin(), insertion_order_.end(), slot));
      // Uniform: the last slot takes the deleted one's place.
      auto place = std::find(uniform_sequence_.begin(), uniform_sequence_.end(), slot);
      *place = uniform_sequence_.back();
      uniform_sequence_.pop_back();
    }
  }

  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  bool Holds(int64_t slot) const { return items_.count(slot) != 0; }
  double PriorityOf(int64_t slot) const { return items_.at(slot).priority; }
  double LeafOf(int64_t slot) const { return items_.at(slot).leaf; }

  // Every kind but prioritized: the slot draw u must give, and its probability.
  int64_t ExpectedSlot(double u) const {
    switch (kind_) {
      case SelectorKind::kUniform: {
        const int64_t n = size();
        return uniform_sequence_[static_cast<size_t>(std::min(n - 1, static_cast<int64_t>(u * n)))];
      }
      case SelectorKind::kFifo:
        return insertion_order_.front();
      case SelectorKind::kLifo:
        return insertion_order_.back();
      case SelectorKind::kMaxHeap:
      case SelectorKind::kMinHeap: {
        const bool highest = kind_ == SelectorKind::kMaxHeap;
        auto best = items_.begin();
        for (auto it = items_.begin(); it != items_.end(); ++it) {
          const Item& a = it->second;
          const Item& b = best->second;
          const bool better = highest ? a.priority > b.priority : a.priority < b.priority;
          if (better || (a.priority == b.priority && a.sequence < b.sequence)) best = it;
        }
        return best->first;
      }
      case SelectorKind::kPrioritized:
        break;
    }
    return -1;
  }

  double ExpectedProbability() const {
    return kind_ == SelectorKind::kUniform ? 1.0 / static_cast<double>(size()) : 1.0;
  }

  // Prioritized: the exact sum of the leaves, and each held slot's interval
  // of masses in slot order (the tree's leaf order).
  long double TotalLeaves() const {
    long double total = 0;
    for (const auto& [slot, item] : items_) total += item.leaf;
    return total;
  }
  MassInterval IntervalOf(int64_t slot) const {
    long double before = 0;
    for (const auto& [held, item] : items_) {
      if (held == slot) return MassInterval{before, before + item.leaf};
      before += item.leaf;
    }
    return MassInterval{-1, -1};
  }

  // ListHeld's documented order: uniform the sequence, fifo and lifo oldest
  // first, heaps by the time their priority was set; prioritized slot order
  // (its order is free; the tests compare it as a set).
  std::vector<int64_t> HeldInRebuildOrder() const {
    switch (kind_) {
      case SelectorKind::kUniform:
        return uniform_sequence_;
      case SelectorKind::kFifo:
      case SelectorKind::kLifo:
        return insertion_order_;
      case SelectorKind::kMaxHeap:
      case SelectorKind::kMinHeap: {
        std::vector<int64_t> slots;
        for (const auto& [slot, item] : items_) slots.push_back(slot);
        std::sort(slots.begin(), slots.end(),
                  [this](int64_t a, int64_t b) { return items_.at(a).sequence < items_.at(b).sequence; });
        return slots;
      }
      case SelectorKind::kPrioritized:
        break;
    }
    std::vector<int64_t> slots;
    for (const auto& [slot, item] : items_) slots.push_back(slot);
    return slots;
  }

 private:
  struct Item {
    double priority;
    double leaf;        // prioritized: the leaf the tree stores
    uint64_t sequence;  // when the priority was last set
  };

  SelectorKind kind_;
  double alpha_;
  std::map<int64_t, Item> items_;
  std::vector<int64_t> insertion_order_;
  std::vector<int64_t> uniform_sequence_;
  uint64_t next_sequence_ = 0;
};

}  // namespace perserve::table::testing
