// KeyIndex: which slot holds the item with a given key, for a table whose
// items take any free slot (their keys are insertion sequence numbers, their
// slots whatever was free).
//
// Direct-mapped: key mod W (a power of two, at least twice the capacity)
// names the one place a key's slot is kept, and the slot's own key (the
// caller's per-slot keys) confirms it. Two live keys collide only if they
// are W or more apart; the keys a table holds at once span less than that
// (a table holds at most one item a step, and its items leave as the ring
// drops their steps, so the keys issued while an item lives are fewer than
// the steps appended meanwhile), and an insert that would collide anyway
// doubles W first. So a find, insert or erase is one or two memory
// accesses, and the items of one append touch consecutive places. 8 bytes
// a place. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace perserve::replay {

class KeyIndex {
 public:
  // `slot_keys` is the caller's key of each slot (kNoKey: none), read for
  // comparisons; it must outlive the index.
  KeyIndex(int64_t capacity, const std::vector<uint64_t>* slot_keys, uint64_t no_key);

  // The slot holding `key`, or -1. O(1).
  int64_t Find(uint64_t key) const {
    const int64_t slot = places_[static_cast<size_t>(key & mask_)];
    return slot >= 0 && (*slot_keys_)[static_cast<size_t>(slot)] == key ? slot : -1;
  }
  // Find of every key, into slots (as long as keys): the same answers, with
  // the memory reads of all keys overlapped (each of a find's two dependent
  // reads is prefetched for every key before any is used), where key by key
  // a learner's update of 512 random keys waits on two cache misses each.
  void FindMany(std::span<const uint64_t> keys, std::span<int64_t> slots) const;
  // `slot` now holds `key` (slot_keys[slot] == key already). O(1), or O(W)
  // when it doubles W.
  void Insert(uint64_t key, int64_t slot);
  // Forgets `key` (call while slot_keys still holds it). O(1).
  void Erase(uint64_t key) {
    int64_t& place = places_[static_cast<size_t>(key & mask_)];
    if (place >= 0 && (*slot_keys_)[static_cast<size_t>(place)] == key) place = -1;
  }
  size_t places() const { return places_.size(); }

 private:
  void Grow();

  std::vector<int64_t> places_;  // per place: a slot, or -1
  uint64_t mask_;
  const std::vector<uint64_t>* slot_keys_;
  uint64_t no_key_;
};

}  // namespace perserve::replay
