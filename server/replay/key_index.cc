#include "replay/key_index.h"

#include <algorithm>
#include <bit>

namespace perserve::replay {

KeyIndex::KeyIndex(int64_t capacity, const std::vector<uint64_t>* slot_keys, uint64_t no_key)
    : places_(std::bit_ceil(static_cast<size_t>(std::max<int64_t>(2, 2 * capacity))), -1),
      mask_(places_.size() - 1),
      slot_keys_(slot_keys),
      no_key_(no_key) {}

void KeyIndex::FindMany(std::span<const uint64_t> keys, std::span<int64_t> slots) const {
  for (const uint64_t key : keys) __builtin_prefetch(&places_[static_cast<size_t>(key & mask_)]);
  const std::vector<uint64_t>& slot_keys = *slot_keys_;
  for (size_t j = 0; j < keys.size(); ++j) {
    slots[j] = places_[static_cast<size_t>(keys[j] & mask_)];
    if (slots[j] >= 0) __builtin_prefetch(&slot_keys[static_cast<size_t>(slots[j])]);
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    if (slots[j] >= 0 && slot_keys[static_cast<size_t>(slots[j])] != keys[j]) slots[j] = -1;
  }
}

void KeyIndex::Insert(uint64_t key, int64_t slot) {
  while (true) {
    int64_t& place = places_[static_cast<size_t>(key & mask_)];
    const bool taken = place >= 0 && place != slot && (*slot_keys_)[static_cast<size_t>(place)] != no_key_ &&
                       ((*slot_keys_)[static_cast<size_t>(place)] & mask_) == (key & mask_);
    if (!taken) {
      place = slot;
      return;
    }
    Grow();
  }
}

void KeyIndex::Grow() {
  // Doubles W until no two held keys share a place (the key being inserted,
  // already in slot_keys, among them): one that took another's place would
  // lose it from the index.
  size_t size = places_.size() * 2;
  const std::vector<uint64_t>& keys = *slot_keys_;
  while (true) {
    places_.assign(size, -1);
    mask_ = size - 1;
    bool collided = false;
    for (size_t slot = 0; slot < keys.size() && !collided; ++slot) {
      if (keys[slot] == no_key_) continue;
      int64_t& place = places_[static_cast<size_t>(keys[slot] & mask_)];
      collided = place >= 0;
      place = static_cast<int64_t>(slot);
    }
    if (!collided) return;
    size *= 2;
  }
}

}  // namespace perserve::replay
