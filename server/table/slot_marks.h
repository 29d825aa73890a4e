// SlotMarks: finds a slot repeated within one batch in O(1) a slot.
//
// One 32-bit stamp a slot: a batch takes a fresh stamp, and a slot already
// carrying it was seen earlier in that batch. Nothing is cleared between
// batches; only when the stamp wraps (every 2^32 - 1 batches) are all reset.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace perserve::table {

class SlotMarks {
 public:
  explicit SlotMarks(int64_t capacity) : stamps_(static_cast<size_t>(capacity), 0) {}

  // Starts a batch: no slot is marked in it yet.
  void BeginBatch() {
    if (++stamp_ == 0) {
      std::fill(stamps_.begin(), stamps_.end(), 0);
      stamp_ = 1;
    }
  }

  // Marks `slot` (in [0, capacity)); false when this batch marked it already.
  bool MarkOnce(int64_t slot) {
    uint32_t& mark = stamps_[static_cast<size_t>(slot)];
    if (mark == stamp_) return false;
    mark = stamp_;
    return true;
  }

 private:
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 0;
};

}  // namespace perserve::table
