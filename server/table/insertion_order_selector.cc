#include "table/insertion_order_selector.h"

namespace perserve::table {

InsertionOrderSelector::InsertionOrderSelector(SelectorKind kind, int64_t capacity)
    : Selector(capacity),
      kind_(kind),
      older_(static_cast<size_t>(capacity), kNotHeld),
      newer_(static_cast<size_t>(capacity), kNone) {}

Status InsertionOrderSelector::InsertChecked(std::span<const int64_t> slots, std::span<const double>) {
  for (const int64_t slot : slots) {
    older_[static_cast<size_t>(slot)] = newest_;
    newer_[static_cast<size_t>(slot)] = kNone;
    if (newest_ == kNone) {
      oldest_ = slot;
    } else {
      newer_[static_cast<size_t>(newest_)] = slot;
    }
    newest_ = slot;
  }
  size_ += static_cast<int64_t>(slots.size());
  return Status::Ok();
}

Status InsertionOrderSelector::UpdateChecked(std::span<const int64_t>, std::span<const double>) {
  return Status::Ok();
}

Status InsertionOrderSelector::DeleteChecked(std::span<const int64_t> slots) {
  for (const int64_t slot : slots) {
    const int64_t older = older_[static_cast<size_t>(slot)];
    const int64_t newer = newer_[static_cast<size_t>(slot)];
    if (older == kNone) {
      oldest_ = newer;
    } else {
      newer_[static_cast<size_t>(older)] = newer;
    }
    if (newer == kNone) {
      newest_ = older;
    } else {
      older_[static_cast<size_t>(newer)] = older;
    }
    older_[static_cast<size_t>(slot)] = kNotHeld;
  }
  size_ -= static_cast<int64_t>(slots.size());
  return Status::Ok();
}

Status InsertionOrderSelector::SelectChecked(std::span<const double>, std::span<int64_t> slots,
                                             std::span<double> probabilities) const {
  const int64_t drawn = kind_ == SelectorKind::kFifo ? oldest_ : newest_;
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i] = drawn;
    probabilities[i] = 1.0;
  }
  return Status::Ok();
}

void InsertionOrderSelector::ListHeld(std::vector<int64_t>* slots) const {
  slots->clear();
  slots->reserve(static_cast<size_t>(size_));
  for (int64_t slot = oldest_; slot != kNone; slot = newer_[static_cast<size_t>(slot)]) slots->push_back(slot);
}

}  // namespace perserve::table
