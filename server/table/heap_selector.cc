#include "table/heap_selector.h"

#include <algorithm>
#include <queue>

namespace perserve::table {

HeapSelector::HeapSelector(SelectorKind kind, int64_t capacity, Ties ties)
    : Selector(capacity), kind_(kind), ties_(ties), position_(static_cast<size_t>(capacity), kNotHeld) {
  heap_.reserve(static_cast<size_t>(capacity));
}

void HeapSelector::Place(size_t index, const Entry& entry) {
  heap_[index] = entry;
  position_[static_cast<size_t>(entry.slot)] = static_cast<int64_t>(index);
}

void HeapSelector::SiftUp(size_t index) {
  const Entry moving = heap_[index];
  while (index > 0) {
    const size_t parent = (index - 1) / 2;
    if (!Before(moving, heap_[parent])) break;
    Place(index, heap_[parent]);
    index = parent;
  }
  Place(index, moving);
}

void HeapSelector::SiftDown(size_t index) {
  const Entry moving = heap_[index];
  const size_t count = heap_.size();
  while (true) {
    size_t child = 2 * index + 1;
    if (child >= count) break;
    if (child + 1 < count && Before(heap_[child + 1], heap_[child])) ++child;
    if (!Before(heap_[child], moving)) break;
    Place(index, heap_[child]);
    index = child;
  }
  Place(index, moving);
}

void HeapSelector::Restore(size_t index) {
  if (index > 0 && Before(heap_[index], heap_[(index - 1) / 2])) {
    SiftUp(index);
  } else {
    SiftDown(index);
  }
}

Status HeapSelector::InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) {
  for (size_t j = 0; j < slots.size(); ++j) {
    heap_.push_back(Entry{RankOf(priorities[j]), next_sequence_++, slots[j]});
    SiftUp(heap_.size() - 1);
  }
  return Status::Ok();
}

Status HeapSelector::UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) {
  for (size_t j = 0; j < slots.size(); ++j) {
    const size_t index = static_cast<size_t>(position_[static_cast<size_t>(slots[j])]);
    heap_[index].rank = RankOf(priorities[j]);
    if (ties_ == Ties::kSetFirst) heap_[index].sequence = next_sequence_++;
    Restore(index);
  }
  return Status::Ok();
}

Status HeapSelector::DeleteChecked(std::span<const int64_t> slots) {
  for (const int64_t slot : slots) {
    const size_t index = static_cast<size_t>(position_[static_cast<size_t>(slot)]);
    position_[static_cast<size_t>(slot)] = kNotHeld;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (index == heap_.size()) continue;  // it was the last entry
    Place(index, last);
    Restore(index);
  }
  return Status::Ok();
}

Status HeapSelector::SelectChecked(std::span<const double>, std::span<int64_t> slots,
                                   std::span<double> probabilities) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i] = heap_.front().slot;
    probabilities[i] = 1.0;
  }
  return Status::Ok();
}

void HeapSelector::ListHeld(std::vector<int64_t>* slots) const {
  std::vector<Entry> by_sequence = heap_;
  std::sort(by_sequence.begin(), by_sequence.end(),
            [](const Entry& a, const Entry& b) { return a.sequence < b.sequence; });
  slots->clear();
  slots->reserve(by_sequence.size());
  for (const Entry& entry : by_sequence) slots->push_back(entry.slot);
}

void HeapSelector::ListFirst(int64_t count, std::vector<int64_t>* slots) const {
  // A best-first walk of the heap: every entry comes after its parent, so the
  // next in order is always a child of one already taken (or the root).
  const auto later = [this](size_t a, size_t b) { return Before(heap_[b], heap_[a]); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> frontier(later);
  slots->clear();
  if (!heap_.empty()) frontier.push(0);
  while (!frontier.empty() && static_cast<int64_t>(slots->size()) < count) {
    const size_t index = frontier.top();
    frontier.pop();
    slots->push_back(heap_[index].slot);
    for (const size_t child : {2 * index + 1, 2 * index + 2}) {
      if (child < heap_.size()) frontier.push(child);
    }
  }
}

}  // namespace perserve::table
