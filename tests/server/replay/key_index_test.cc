// KeyIndex (issue 33): the map from an item's key to the slot that holds it,
// direct-mapped (key mod W), each place confirmed by the slot's own key.
// Find, Insert and Erase; places left stale when a slot is reused; the
// doubling of W when two live keys would share a place.
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "replay/key_index.h"

namespace perserve::replay {
namespace {

constexpr uint64_t kNoKey = ~uint64_t{0};

// A table's per-slot keys and the index over them, kept in step as the
// Replay keeps them: the slot's key set before Insert, erased before cleared.
struct Table {
  explicit Table(int64_t capacity)
      : slot_keys(static_cast<size_t>(capacity), kNoKey), index(capacity, &slot_keys, kNoKey) {}
  void Put(uint64_t key, int64_t slot) {
    slot_keys[static_cast<size_t>(slot)] = key;
    index.Insert(key, slot);
  }
  void Free(int64_t slot) {
    index.Erase(slot_keys[static_cast<size_t>(slot)]);
    slot_keys[static_cast<size_t>(slot)] = kNoKey;
  }
  std::vector<uint64_t> slot_keys;
  KeyIndex index;
};

TEST(KeyIndexTest, FindsInsertedKeysAndForgetsErasedOnes) {
  Table table(4);
  EXPECT_EQ(table.index.places(), 8u);  // the power of two at least twice the capacity
  EXPECT_EQ(table.index.Find(0), -1);
  table.Put(10, 2);
  table.Put(11, 0);
  EXPECT_EQ(table.index.Find(10), 2);
  EXPECT_EQ(table.index.Find(11), 0);
  EXPECT_EQ(table.index.Find(12), -1);
  EXPECT_EQ(table.index.Find(2), -1);  // same place as 10, another key: the slot's key says no
  table.Free(2);
  EXPECT_EQ(table.index.Find(10), -1);
  EXPECT_EQ(table.index.Find(11), 0);
  // Erasing a key that is not held leaves the place's key alone.
  table.index.Erase(3);  // place of 11
  EXPECT_EQ(table.index.Find(11), 0);
  table.index.Erase(11 + 8);  // the same place, a key never inserted
  EXPECT_EQ(table.index.Find(11), 0);
}

// A slot freed without its place cleared (or a place pointing at a slot a
// later key took) is stale: the slot's own key tells, so the old key is
// not found there, and a new key whose place it is takes it without growing.
TEST(KeyIndexTest, PlacesLeftStaleBySlotReuseFindNothingAndAreTakenOver) {
  Table table(4);
  table.Put(5, 1);
  // Slot 1 is reused by key 6 (another place) without key 5's place being cleared.
  table.slot_keys[1] = 6;
  table.index.Insert(6, 1);
  EXPECT_EQ(table.index.Find(5), -1);
  EXPECT_EQ(table.index.Find(6), 1);
  // Key 13 has key 5's place (13 mod 8), which points at slot 1, now key 6's:
  // stale, so it is taken over, no doubling.
  table.Put(13, 3);
  EXPECT_EQ(table.index.places(), 8u);
  EXPECT_EQ(table.index.Find(13), 3);
  EXPECT_EQ(table.index.Find(6), 1);
  EXPECT_EQ(table.index.Find(5), -1);
  // And a place whose slot is free (kNoKey) is stale too.
  table.Put(20, 2);  // place 4
  table.slot_keys[2] = kNoKey;
  EXPECT_EQ(table.index.Find(20), -1);
  table.Put(28, 0);  // place 4 again
  EXPECT_EQ(table.index.places(), 8u);
  EXPECT_EQ(table.index.Find(28), 0);
  // A key put again into the slot it holds keeps its place.
  table.index.Insert(28, 0);
  EXPECT_EQ(table.index.places(), 8u);
  EXPECT_EQ(table.index.Find(28), 0);
}

// Two live keys W apart share a place: the second insert doubles W (again,
// while they still collide), and every live key is found afterwards.
TEST(KeyIndexTest, TwoLiveKeysThatCollideDoubleThePlaces) {
  Table table(4);
  table.Put(3, 0);
  table.Put(7, 1);
  ASSERT_EQ(table.index.places(), 8u);
  table.Put(3 + 8, 2);  // place 3 holds live key 3: 16 places
  EXPECT_EQ(table.index.places(), 16u);
  EXPECT_EQ(table.index.Find(3), 0);
  EXPECT_EQ(table.index.Find(7), 1);
  EXPECT_EQ(table.index.Find(11), 2);
  table.Put(3 + 64, 3);  // collides with 3 at 16 and 32 places: 128
  EXPECT_EQ(table.index.places(), 128u);
  for (const auto& [key, slot] : std::vector<std::pair<uint64_t, int64_t>>{{3, 0}, {7, 1}, {11, 2}, {67, 3}}) {
    EXPECT_EQ(table.index.Find(key), slot) << key;
  }
  // A freed key no longer collides: its place is taken without doubling.
  table.Free(3);
  table.Put(3 + 128, 0);
  EXPECT_EQ(table.index.places(), 128u);
  EXPECT_EQ(table.index.Find(131), 0);
  EXPECT_EQ(table.index.Find(3), -1);
}

// Random use as a table uses it (keys in insertion order, any free slot,
// keys far apart now and then), against a plain map.
TEST(KeyIndexTest, RandomUseAgreesWithAMap) {
  const int64_t capacity = 64;
  Table table(capacity);
  std::mt19937_64 generator(33);
  std::vector<int64_t> free_slots;
  for (int64_t slot = capacity - 1; slot >= 0; --slot) free_slots.push_back(slot);
  std::vector<uint64_t> held;  // keys held
  uint64_t next_key = 0;
  for (int round = 0; round < 20000; ++round) {
    if (!free_slots.empty() && (held.empty() || generator() % 3 != 0)) {
      if (generator() % 500 == 0) next_key += generator() % 1000;  // a jump: keys far apart
      const int64_t slot = free_slots.back();
      free_slots.pop_back();
      table.Put(next_key, slot);
      held.push_back(next_key++);
    } else {
      const size_t victim = static_cast<size_t>(generator() % held.size());
      const int64_t slot = table.index.Find(held[victim]);
      ASSERT_GE(slot, 0);
      table.Free(slot);
      free_slots.push_back(slot);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    if (round % 97 == 0) {
      for (const uint64_t key : held) ASSERT_EQ(table.slot_keys[table.index.Find(key)], key) << "round " << round;
      for (uint64_t key = next_key; key < next_key + 8; ++key) ASSERT_EQ(table.index.Find(key), -1);
    }
  }
}

}  // namespace
}  // namespace perserve::replay
