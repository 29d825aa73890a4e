// Issue 33, finding 2: a table's items over one step ring (the one item
// model). The old item ring had --capacity slots and counted evicted items
// too: an item whose steps were all still held could vanish when it wrapped
// (sequences with period 8 over a ring of 8192 steps), and every slot's item
// columns were written. Now an item leaves only with its steps (or when the
// table is full), and item columns are written only in the slots items used.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "server/replay/resident_pages.h"
#include "server/replay/step_test_util.h"

namespace perserve::replay::step_test {
namespace {

// `count` TestStepSchema steps, obs bytes from `first`, done (terminal) where `done` says.
std::vector<std::byte> Steps(int64_t first, int64_t count, const std::vector<bool>& done) {
  std::vector<std::vector<std::vector<std::byte>>> rows;
  for (int64_t j = 0; j < count; ++j) {
    std::vector<std::vector<std::byte>> row;
    row.emplace_back(6, static_cast<std::byte>(first + j));  // obs
    row.emplace_back(4, std::byte{0});                         // reward 0.0f
    row.emplace_back(16, std::byte{0});                        // pos
    row.emplace_back(1, done[static_cast<size_t>(j)] ? std::byte{1} : std::byte{0});
    row.emplace_back(4, std::byte{0});  // action
    rows.push_back(std::move(row));
  }
  return WireLayout(rows, 5);
}

// Sequences of 16 with period 8 over a ring of 8192 steps, a table of 8192
// items with an 8 KiB item column, two streams of long episodes; every
// sequence is created as soon as it can be. The ring wraps 5 times; after
// every append each item ever created is held exactly while its first step
// is (never vanishing before), and the item slots used stay at the most
// items held (about 1024), their item columns' pages past them untouched.
TEST(StepItemsTest, AnItemWhoseStepsAreAllHeldNeverVanishes) {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 16;
  options.sequence_period = 8;
  options.step_capacity = 8192;
  options.streams = 2;
  options.item_columns = {Column{"state", DType::kFloat32, {2048}}};
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, TestStepSchema(), 8192, &f).ok());

  std::mt19937_64 rng(2);
  struct Stream {
    int64_t steps = 0;
    int64_t episode_left = 0;
    int64_t next_start = 0;  // the next sequence start not yet created
  };
  std::vector<Stream> streams(2);
  std::vector<uint64_t> item_step_key;  // per item key: the key of its first step
  const std::vector<std::byte> state(static_cast<size_t>(8192));
  int64_t most_held = 0;
  while (f.steps->next_step_key() < 5 * 8192) {
    const int s = static_cast<int>(rng() % 2);
    Stream& stream = streams[s];
    const int64_t count = 1 + static_cast<int64_t>(rng() % 64);
    std::vector<bool> done(static_cast<size_t>(count), false);
    for (int64_t j = 0; j < count; ++j) {
      if (stream.episode_left == 0) stream.episode_left = 20 + static_cast<int64_t>(rng() % 300);
      done[static_cast<size_t>(j)] = --stream.episode_left == 0;
    }
    const std::vector<std::byte> bulk = Steps(stream.steps, count, done);
    // The sequences this append makes creatable: whole, or cut short by an episode's end.
    const int64_t have = stream.steps + count;
    std::vector<int64_t> starts;
    for (int64_t j = 0; j <= count; ++j) {
      const bool ends = j < count && done[static_cast<size_t>(j)];
      const int64_t last = ends ? stream.steps + j : have - 1;  // the episode's last step so far
      if (j < count && !ends) continue;
      while (stream.next_start + options.sequence_length - 1 <= last || (ends && stream.next_start <= last)) {
        starts.push_back(stream.next_start);
        stream.next_start += options.sequence_period;
      }
      if (ends) stream.next_start = stream.steps + j + 1;  // the next episode's first step
    }
    std::vector<std::byte> item_columns;
    for (size_t j = 0; j < starts.size(); ++j) item_columns.insert(item_columns.end(), state.begin(), state.end());
    uint64_t first = 0;
    const Status appended = f.steps->Append(s, stream.steps, count, bulk, starts, {}, item_columns, &first);
    ASSERT_TRUE(appended.ok()) << appended.ToString();
    ASSERT_EQ(first, item_step_key.size());  // keys in creation order
    for (const int64_t t : starts) item_step_key.push_back(f.steps->steps().KeyOf(s, t));
    stream.steps = have;

    const uint64_t oldest = f.steps->steps().oldest_key();
    int64_t held = 0;
    for (uint64_t key = 0; key < item_step_key.size(); ++key) {
      const bool whole = item_step_key[key] >= oldest;
      ASSERT_EQ(f.items->SlotOf(key) >= 0, whole)
          << "item " << key << " over step key " << item_step_key[key] << " (the ring holds " << oldest << " ..)";
      held += whole;
    }
    ASSERT_EQ(f.items->size(), held);
    most_held = std::max(most_held, held);
    ASSERT_EQ(f.items->slots_used(), most_held);
  }
  EXPECT_GT(item_step_key.size(), 4500u);
  EXPECT_LT(most_held, 1100);
  // The item column's pages past the slots used (and the huge page they end in) were never written.
  const int64_t capacity = f.items->capacity();
  const std::span<const std::byte> column = f.items->store().Rows(1, 0, capacity);
  const size_t huge_page = size_t{2} << 20;
  const size_t untouched_from = (static_cast<size_t>(most_held) * 8192 + huge_page - 1) / huge_page * huge_page;
  EXPECT_FALSE(replay_test::AnyPageResident(column.data() + untouched_from, column.data() + column.size()))
      << "item columns past the " << most_held << " item slots used were written";
}

// Transitions, the one-step items: the item at step t is step t, its row
// the step's own row in the ring. An item leaves when its step leaves the
// ring, whatever room the table has (16 items over a ring of 8 steps), or
// when the table is full (4 items over a ring of 8: the oldest first, their
// steps still held); either way its key is stale.
TEST(StepItemsTest, TransitionsLeaveWithTheirStepsOrWhenTheTableIsFull) {
  for (const int64_t item_capacity : {16, 4}) {
    SCOPED_TRACE(item_capacity);
    StepOptions options;
    options.kind = StepOptions::Kind::kTransition;
    options.step_capacity = 8;
    std::unique_ptr<StepReplay> replay;
    ASSERT_TRUE(StepReplay::Create(options, ReplayOptions{item_capacity, 1.0, tree::Device::kCpu, 3},
                                   Schema{{{"id", DType::kInt64, {}}}}, &replay)
                    .ok());
    ASSERT_TRUE(replay->RowsAreSteps());
    uint64_t first = 0;
    for (int64_t id = 0; id < 12; ++id) {
      const std::span<const std::byte> row = std::as_bytes(std::span(&id, 1));
      const TableItems add{0, true};
      ASSERT_TRUE(replay->Append(AppendRequest{0, id, store::StepBatch{1, row}, {&add, 1}}, &first).ok());
      ASSERT_EQ(first, static_cast<uint64_t>(id));
    }
    const Replay& items = replay->items();
    EXPECT_EQ(items.size(), std::min<int64_t>(8, item_capacity));
    const uint64_t oldest_held = 12 - static_cast<uint64_t>(items.size());
    for (uint64_t key = 0; key < 12; ++key) {
      const int64_t slot = items.SlotOf(key);
      ASSERT_EQ(slot >= 0, key >= oldest_held) << "key " << key;
      if (slot < 0) continue;
      std::vector<int64_t> step_slots;
      replay->StepSlots(std::span<const int64_t>(&slot, 1), &step_slots);
      EXPECT_EQ(step_slots[0], replay->steps().SlotOf(key)) << "the item at step key " << key << " is that step";
      int64_t id = -1;
      replay->Assemble(std::span<const int64_t>(&slot, 1), std::as_writable_bytes(std::span(&id, 1)));
      EXPECT_EQ(id, static_cast<int64_t>(key));
    }
    EXPECT_EQ(items.slots_used(), items.size()) << "a slot freed is taken again";
    UpdateCounts counts;
    ASSERT_TRUE(replay->mutable_items()
                    .UpdatePriorities(std::vector<uint64_t>{3, oldest_held}, std::vector<double>{2.0, 2.0}, &counts)
                    .ok());
    EXPECT_EQ(counts.stale, 1);
    EXPECT_EQ(counts.applied, 1);
  }
}

}  // namespace
}  // namespace perserve::replay::step_test
