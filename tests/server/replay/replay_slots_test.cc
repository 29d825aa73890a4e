// Where a Replay's items go (issue 33, the one item model): an item takes a
// free slot, the last freed first, else one never used, so the slots used
// (and the store's memory) grow with the items held, not with the capacity;
// a full table's FIFO remover takes the oldest items; an Add's `removed`
// items and its new ones make one tree update; PlanSlots says beforehand
// exactly what Add then does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "server/replay/resident_pages.h"
#include "server/replay/replay_test_util.h"
#include "tree/priority_tree.h"

namespace perserve::replay {
namespace {

using replay_test::Ids;
using replay_test::Leaf;

std::unique_ptr<Replay> MakeReplay(int64_t capacity, double alpha = 1.0) {
  return replay_test::MakeReplay(ReplayOptions{capacity, alpha, tree::Device::kCpu, 5});
}

TEST(ReplaySlotsTest, AnItemTakesTheLastFreedSlotElseANeverUsedOne) {
  auto replay = MakeReplay(8);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(5, Ids(0, 5), {}, &first).ok());
  for (uint64_t key = 0; key < 5; ++key) EXPECT_EQ(replay->SlotOf(key), static_cast<int64_t>(key));
  EXPECT_EQ(replay->slots_used(), 5);
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1, 3}).ok());  // freed: slot 1, then slot 3
  ASSERT_TRUE(replay->Add(1, Ids(5, 1), {}, &first).ok());
  EXPECT_EQ(replay->SlotOf(5), 3);
  ASSERT_TRUE(replay->Add(2, Ids(6, 2), {}, &first).ok());
  EXPECT_EQ(replay->SlotOf(6), 1);
  EXPECT_EQ(replay->SlotOf(7), 5);  // none freed left: a slot never used
  EXPECT_EQ(replay->slots_used(), 6);
  EXPECT_EQ(replay->KeyAt(6), Replay::kNoKey);
  EXPECT_EQ(replay->size(), 6);
}

// Full, an add pushes out the oldest held items (smallest keys), whatever
// their slots; an add's `removed` items go first, and only what is still
// over the capacity is pushed out.
TEST(ReplaySlotsTest, AFullTableRemovesItsOldestItemsFirst) {
  auto replay = MakeReplay(4);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(4, Ids(0, 4), std::vector<double>{1, 2, 3, 4}, &first).ok());
  ASSERT_TRUE(replay->Remove(std::vector<uint64_t>{1}).ok());
  ASSERT_TRUE(replay->Add(2, Ids(4, 2), std::vector<double>{5, 6}, &first).ok());  // 3 held + 2: key 0 leaves
  EXPECT_EQ(replay->size(), 4);
  EXPECT_EQ(replay->SlotOf(0), -1);
  EXPECT_EQ(replay->SlotOf(4), 0);  // slot 0 was freed last
  EXPECT_EQ(replay->SlotOf(5), 1);
  EXPECT_EQ(replay->oldest_key(), 2u);
  // Removing key 3 makes room for one; the second new item pushes out key 2.
  ASSERT_TRUE(replay->Add(2, Ids(6, 2), std::vector<double>{7, 8}, &first, std::vector<uint64_t>{3}).ok());
  EXPECT_EQ(replay->size(), 4);
  EXPECT_EQ(replay->SlotOf(2), -1);
  EXPECT_EQ(replay->SlotOf(3), -1);
  EXPECT_EQ(replay->SlotOf(6), 2);
  EXPECT_EQ(replay->SlotOf(7), 3);
  EXPECT_EQ(replay->oldest_key(), 4u);
  EXPECT_EQ(replay->tree().Total(), 5.0 + 6.0 + 7.0 + 8.0);
  EXPECT_EQ(replay->slots_used(), 4);
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0, 2, 3, 6}, std::vector<double>{9, 9, 9, 9}, &counts)
                  .ok());
  EXPECT_EQ(counts.stale, 3);
  EXPECT_EQ(counts.applied, 1);
}

// An Add with `removed` keys: the removed items' leaves are 0 where no new
// item takes their slot, the new items' leaves where they do, and nothing
// else changes: every node (sums and mins) bit-identical to a reference
// tree given just those leaves.
TEST(ReplaySlotsTest, AnAddWithRemovedItemsLeavesTheTreeAsOneUpdateOfThoseLeaves) {
  const int64_t capacity = 64;
  const double alpha = 0.6;
  auto replay = MakeReplay(capacity, alpha);
  std::unique_ptr<tree::PriorityTree> reference;
  ASSERT_TRUE(tree::PriorityTree::Create(capacity, tree::Device::kCpu, &reference).ok());
  std::vector<double> priorities(40);
  std::vector<int64_t> slots(40);
  for (size_t j = 0; j < priorities.size(); ++j) {
    priorities[j] = 0.5 + static_cast<double>((j * 13) % 17);
    slots[j] = static_cast<int64_t>(j);
  }
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(40, Ids(0, 40), priorities, &first).ok());
  ASSERT_TRUE(reference->UpdateWithExponent(slots, priorities, alpha).ok());

  // 7 removed (keys 3, 9, 10, 17, 25, 30, 38), 4 new: the new take slots 38, 30, 25, 17 (the last
  // removed first); slots 3, 9 and 10 end with leaf 0.
  const std::vector<uint64_t> removed = {3, 9, 10, 17, 25, 30, 38};
  const std::vector<double> added = {2.5, 0.25, 7.0, 3.0};
  std::vector<int64_t> planned;
  replay->PlanSlots(removed, 4, &planned);
  EXPECT_EQ(planned, (std::vector<int64_t>{38, 30, 25, 17}));
  ASSERT_TRUE(replay->Add(4, Ids(40, 4), added, &first, removed).ok());
  for (size_t j = 0; j < planned.size(); ++j) EXPECT_EQ(replay->SlotOf(40 + j), planned[j]);
  ASSERT_TRUE(reference->UpdateWithExponent(planned, added, alpha).ok());
  ASSERT_TRUE(reference->Update(std::vector<int64_t>{3, 9, 10}, std::vector<double>{0, 0, 0}).ok());

  const size_t nodes = static_cast<size_t>(2 * replay->tree().capacity());
  ASSERT_EQ(reference->capacity(), replay->tree().capacity());
  std::vector<double> sums(nodes), mins(nodes), reference_sums(nodes), reference_mins(nodes);
  ASSERT_TRUE(replay->tree().ReadNodes(sums, mins).ok());
  ASSERT_TRUE(reference->ReadNodes(reference_sums, reference_mins).ok());
  for (size_t node = 1; node < nodes; ++node) {
    ASSERT_EQ(sums[node], reference_sums[node]) << "node " << node;
    ASSERT_EQ(mins[node], reference_mins[node]) << "node " << node;
  }
  EXPECT_EQ(replay->size(), 37);
}

// The contract as a small model: held keys and their slots, the free slots
// (a stack), the slots never used, the keys in insertion order.
struct ReplayModel {
  int64_t capacity = 0;
  std::map<uint64_t, int64_t> held;
  std::vector<int64_t> free;
  int64_t fresh = 0;
  uint64_t next_key = 0;
  void Free(uint64_t key) {
    const auto it = held.find(key);
    if (it == held.end()) return;
    free.push_back(it->second);
    held.erase(it);
  }
  // Returns the new items' slots; *pushed_out the slots the FIFO remover took.
  std::vector<int64_t> Add(const std::vector<uint64_t>& removed, int64_t count, std::vector<int64_t>* pushed_out) {
    for (const uint64_t key : removed) Free(key);
    pushed_out->clear();
    while (static_cast<int64_t>(held.size()) + count > capacity) {
      pushed_out->push_back(held.begin()->second);
      Free(held.begin()->first);
    }
    std::vector<int64_t> slots;
    for (int64_t j = 0; j < count; ++j) {
      int64_t slot = fresh;
      if (free.empty()) {
        ++fresh;
      } else {
        slot = free.back();
        free.pop_back();
      }
      held[next_key++] = slot;
      slots.push_back(slot);
    }
    return slots;
  }
};

// Random adds (with removed keys held, gone or never issued) and removes:
// PlanSlots gives the slots Add then takes and the slots the FIFO remover
// empties, both as the model says, and every held key sits where the model
// puts it.
TEST(ReplaySlotsTest, PlanSlotsIsWhatAddThenDoes) {
  for (const int64_t capacity : {1, 5, 16}) {
    SCOPED_TRACE(capacity);
    auto replay = MakeReplay(capacity);
    ReplayModel model;
    model.capacity = capacity;
    std::mt19937_64 generator(static_cast<uint64_t>(capacity));
    for (int round = 0; round < 3000; ++round) {
      std::vector<uint64_t> removed;
      const uint64_t issued = replay->next_key();
      for (int k = 0; k < 4 && issued > 0; ++k) {
        const uint64_t key = generator() % (issued + 2);  // now and then a key never issued
        if (std::find(removed.begin(), removed.end(), key) == removed.end()) removed.push_back(key);
      }
      if (generator() % 4 == 0) {
        ASSERT_TRUE(replay->Remove(removed).ok());
        for (const uint64_t key : removed) model.Free(key);
      } else {
        const int64_t count = 1 + static_cast<int64_t>(generator() % static_cast<uint64_t>(capacity));
        std::vector<int64_t> planned, pushed_out, model_pushed_out;
        replay->PlanSlots(removed, count, &planned, &pushed_out);
        const std::vector<int64_t> expected = model.Add(removed, count, &model_pushed_out);
        ASSERT_EQ(planned, expected) << "round " << round;
        ASSERT_EQ(pushed_out, model_pushed_out) << "round " << round;
        uint64_t first = 0;
        ASSERT_TRUE(replay->Add(count, Ids(static_cast<int64_t>(issued), count), {}, &first, removed).ok());
        ASSERT_EQ(first, issued);
        for (int64_t j = 0; j < count; ++j) {
          ASSERT_EQ(replay->SlotOf(first + static_cast<uint64_t>(j)), planned[j]) << "round " << round;
        }
      }
      ASSERT_EQ(replay->size(), static_cast<int64_t>(model.held.size())) << "round " << round;
      ASSERT_EQ(replay->slots_used(), model.fresh) << "round " << round;
      ASSERT_EQ(replay->oldest_key(), model.held.empty() ? replay->next_key() : model.held.begin()->first);
      for (uint64_t key = 0; key < replay->next_key(); ++key) {
        const auto it = model.held.find(key);
        ASSERT_EQ(replay->SlotOf(key), it == model.held.end() ? -1 : it->second) << "round " << round << " key "
                                                                                  << key;
      }
    }
  }
}

// Memory grows with the items held: a table of 8192 items of 8 KiB rows
// that never holds more than 200 uses 200 slots, and the store's pages past
// them (past the huge page they end in) were never touched.
TEST(ReplaySlotsTest, SlotsUsedStayAtTheMostItemsHeldNotTheCapacity) {
  const int64_t capacity = 8192, row = 8192;  // 64 MiB: mapped fresh, never heap memory reused
  std::unique_ptr<Replay> replay = replay_test::MakeReplay(ReplayOptions{capacity, 1.0, tree::Device::kCpu, 5},
                                                           Schema{{{"state", DType::kUInt8, {row}}}});
  std::mt19937_64 generator(8);
  std::deque<uint64_t> held;
  int64_t most = 0;
  for (int round = 0; round < 2000; ++round) {
    const int64_t count = 1 + static_cast<int64_t>(generator() % 20);
    std::vector<uint64_t> removed;
    while (static_cast<int64_t>(held.size()) + count > 200 || (!held.empty() && generator() % 3 == 0)) {
      removed.push_back(held.front());
      held.pop_front();
    }
    uint64_t first = 0;
    const std::vector<std::byte> rows(static_cast<size_t>(count * row), std::byte{7});
    ASSERT_TRUE(replay->Add(count, rows, {}, &first, removed).ok());
    for (int64_t j = 0; j < count; ++j) held.push_back(first + static_cast<uint64_t>(j));
    most = std::max<int64_t>(most, static_cast<int64_t>(held.size()));
    ASSERT_EQ(replay->size(), static_cast<int64_t>(held.size()));
    ASSERT_EQ(replay->slots_used(), most) << "round " << round;
  }
  EXPECT_EQ(most, 200);
  const std::span<const std::byte> column = replay->store().Rows(0, 0, capacity);
  const size_t touched = static_cast<size_t>(most * row);
  const size_t huge_page = size_t{2} << 20;
  const size_t untouched_from = (touched + huge_page - 1) / huge_page * huge_page;
  EXPECT_FALSE(replay_test::AnyPageResident(column.data() + untouched_from, column.data() + column.size()))
      << "rows past the " << most << " slots used were written";
}

}  // namespace
}  // namespace perserve::replay
