#include "table/uniform_selector.h"

#include <algorithm>

namespace perserve::table {

UniformSelector::UniformSelector(int64_t capacity)
    : Selector(capacity), place_(static_cast<size_t>(capacity), kNotHeld) {
  sequence_.reserve(static_cast<size_t>(capacity));
}

Status UniformSelector::InsertChecked(std::span<const int64_t> slots, std::span<const double>) {
  for (const int64_t slot : slots) {
    place_[static_cast<size_t>(slot)] = static_cast<int64_t>(sequence_.size());
    sequence_.push_back(slot);
  }
  return Status::Ok();
}

Status UniformSelector::UpdateChecked(std::span<const int64_t>, std::span<const double>) { return Status::Ok(); }

Status UniformSelector::DeleteChecked(std::span<const int64_t> slots) {
  for (const int64_t slot : slots) {
    const int64_t place = place_[static_cast<size_t>(slot)];
    const int64_t last = sequence_.back();
    sequence_[static_cast<size_t>(place)] = last;
    place_[static_cast<size_t>(last)] = place;
    sequence_.pop_back();
    place_[static_cast<size_t>(slot)] = kNotHeld;
  }
  return Status::Ok();
}

Status UniformSelector::SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                                      std::span<double> probabilities) const {
  const int64_t count = size();
  const double probability = 1.0 / static_cast<double>(count);
  for (size_t i = 0; i < fractions.size(); ++i) {
    const int64_t place = std::min(count - 1, static_cast<int64_t>(fractions[i] * static_cast<double>(count)));
    slots[i] = sequence_[static_cast<size_t>(place)];
    probabilities[i] = probability;
  }
  return Status::Ok();
}

}  // namespace perserve::table
