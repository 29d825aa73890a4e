#include "service/row_pins.h"

#include <algorithm>

namespace perserve::service {

void RowPins::Pin(uint64_t token, int client, std::span<const int64_t> slots) {
  if (counts_.empty()) counts_.assign(static_cast<size_t>(capacity_), 0);
  for (const int64_t slot : slots) ++counts_[static_cast<size_t>(slot)];
  replies_.emplace(token, Reply{client, {slots.begin(), slots.end()}});
}

void RowPins::Release(std::span<const uint64_t> tokens) {
  for (const uint64_t token : tokens) {
    const auto found = replies_.find(token);
    if (found == replies_.end()) continue;
    for (const int64_t slot : found->second.slots) --counts_[static_cast<size_t>(slot)];
    replies_.erase(found);
  }
}

bool RowPins::Holds(int64_t first_slot, int64_t count) const {
  if (replies_.empty()) return false;
  for (int64_t j = 0; j < count; ++j) {
    if (counts_[static_cast<size_t>((first_slot + j) % capacity_)] != 0) return true;
  }
  return false;
}

int RowPins::OldestClient() const {
  if (replies_.empty()) return 0;
  return std::min_element(replies_.begin(), replies_.end(),
                          [](const auto& a, const auto& b) { return a.first < b.first; })
      ->second.client;
}

}  // namespace perserve::service
