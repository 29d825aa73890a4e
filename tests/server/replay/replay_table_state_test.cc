// Replay's lowest-priority remover, and checkpoint round trips for every
// sampler, the remover and max_times_sampled: a restored replay draws what
// its uninterrupted twin draws.
#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "replay/replay.h"
#include "server/replay/replay_test_util.h"

namespace perserve::replay {
namespace {

using replay_test::Ids;
using table::SelectorKind;

ReplayOptions TableOptions(SelectorKind sampler, RemoverKind remover, int64_t max_times_sampled, int64_t capacity) {
  ReplayOptions options{capacity, 0.6, tree::Device::kCpu, 23};
  options.sampler = sampler;
  options.remover = remover;
  options.max_times_sampled = max_times_sampled;
  return options;
}

void AddWith(Replay& replay, const std::vector<double>& priorities) {
  uint64_t first = 0;
  const int64_t count = static_cast<int64_t>(priorities.size());
  const Status status = replay.Add(count, Ids(static_cast<int64_t>(replay.next_key()), count), priorities, &first);
  ASSERT_TRUE(status.ok()) << status.ToString();
}

bool Holds(const Replay& replay, uint64_t key) { return replay.SlotOf(key) >= 0; }

TEST(ReplayRemoverTest, LowestPriorityLeavesFirstAndTheOlderOfEquals) {
  auto replay = replay_test::MakeReplay(
      TableOptions(SelectorKind::kPrioritized, RemoverKind::kLowestPriorityFirst, 0, 4));
  AddWith(*replay, {3.0, 1.0, 2.0, 1.0});
  // Key 1 and key 3 tie at the lowest: an update to the same value does not
  // send the older behind its equal.
  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{1}, std::vector<double>{1.0}, &counts).ok());
  std::vector<int64_t> planned, pushed_out;
  replay->PlanSlots({}, 1, &planned, &pushed_out);
  EXPECT_EQ(pushed_out, std::vector<int64_t>{replay->SlotOf(1)});
  AddWith(*replay, {5.0});
  EXPECT_FALSE(Holds(*replay, 1));
  EXPECT_EQ(replay->SlotOf(4), planned[0]);
  AddWith(*replay, {5.0});
  EXPECT_FALSE(Holds(*replay, 3));
  // An update moves an item to the front of the line.
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{0.5}, &counts).ok());
  AddWith(*replay, {5.0});
  EXPECT_FALSE(Holds(*replay, 0));
  EXPECT_TRUE(Holds(*replay, 2));
  EXPECT_EQ(replay->size(), 4);
}

// PlanSlots names the slots Add then takes when the remover is a min-heap and
// the add removes items of its own.
TEST(ReplayRemoverTest, PlanSlotsIsWhatAddThenDoesWithTheLowestPriorityRemover) {
  auto replay = replay_test::MakeReplay(
      TableOptions(SelectorKind::kUniform, RemoverKind::kLowestPriorityFirst, 0, 4));
  AddWith(*replay, {2.0, 0.5, 4.0, 1.0});
  const std::vector<uint64_t> removed = {1};
  std::vector<int64_t> planned, pushed_out;
  replay->PlanSlots(removed, 2, &planned, &pushed_out);
  // Key 1 (the lowest) is removed by the add itself; the remover takes key 3 next.
  EXPECT_EQ(pushed_out, std::vector<int64_t>{replay->SlotOf(3)});
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(2, Ids(4, 2), std::vector<double>{3.0, 3.0}, &first, removed).ok());
  EXPECT_EQ((std::vector<int64_t>{replay->SlotOf(4), replay->SlotOf(5)}), planned);
  EXPECT_TRUE(Holds(*replay, 0));
  EXPECT_TRUE(Holds(*replay, 2));
  EXPECT_FALSE(Holds(*replay, 3));
}

// Everything a checkpoint of the replay holds, taken through its public calls.
struct Snapshot {
  std::vector<uint64_t> keys;
  std::vector<int64_t> slots;
  std::vector<double> leaves;
  std::vector<std::byte> rows;
  ReplayState state;
  int64_t slots_used = 0;
  std::vector<int64_t> free_slots;
  SelectorState selectors;
};

Snapshot Take(const Replay& replay) {
  Snapshot snapshot;
  for (int64_t slot = 0; slot < replay.slots_used(); ++slot) {
    if (replay.KeyAt(slot) == Replay::kNoKey) continue;
    snapshot.keys.push_back(replay.KeyAt(slot));
    snapshot.slots.push_back(slot);
    snapshot.leaves.push_back(replay_test::Leaf(replay, slot));
  }
  snapshot.rows.resize(snapshot.slots.size() * sizeof(int64_t));
  replay.store().Gather(snapshot.slots, snapshot.rows);
  snapshot.state = replay.State();
  snapshot.slots_used = replay.slots_used();
  snapshot.free_slots.assign(replay.free_slots().begin(), replay.free_slots().end());
  snapshot.selectors = replay.Selectors();
  return snapshot;
}

Status Restore(const Snapshot& snapshot, Replay& replay) {
  PERSERVE_RETURN_IF_ERROR(replay.RestoreItems(snapshot.keys, snapshot.slots, snapshot.rows, snapshot.leaves));
  PERSERVE_RETURN_IF_ERROR(replay.RestoreState(snapshot.state));
  PERSERVE_RETURN_IF_ERROR(replay.RestoreFreeSlots(snapshot.slots_used, snapshot.free_slots));
  return replay.RestoreSelectors(snapshot.selectors);
}

// Rounds of adds, samples, updates (of the keys just drawn) and removals;
// the trace holds everything each call said.
std::string RunRounds(Replay& replay, int first_round, int last_round) {
  std::string trace;
  std::vector<uint64_t> drawn;
  for (int round = first_round; round < last_round; ++round) {
    std::vector<double> priorities;
    for (int j = 0; j < 3; ++j) priorities.push_back(1.0 + (round * 7 + j * 3) % 5);
    uint64_t first = 0;
    const std::vector<uint64_t> removed = {static_cast<uint64_t>(round)};  // often not held: ignored
    trace += replay.Add(3, Ids(round * 3, 3), priorities, &first, round % 3 == 0 ? removed : std::vector<uint64_t>{})
                 .ToString();
    SampleResult result;
    trace += replay.Sample(2, 0.5, &result).ToString();
    for (size_t i = 0; i < result.keys.size(); ++i) {
      trace += fmt::format(" {}@{} p{} w{}", result.keys[i], result.slots[i], result.probabilities[i],
                           result.weights[i]);
    }
    std::vector<double> updated;
    for (size_t i = 0; i < result.keys.size(); ++i) updated.push_back(0.25 + (round + i) % 4);
    UpdateCounts counts;
    trace += replay.UpdatePriorities(result.keys, updated, &counts).ToString();
    trace += fmt::format(" size {} next {}\n", replay.size(), replay.next_key());
  }
  return trace;
}

TEST(ReplayTableStateTest, EveryKindRestoresToDrawAsItsUninterruptedTwin) {
  const struct {
    SelectorKind sampler;
    RemoverKind remover;
    int64_t max_times_sampled;
  } cases[] = {
      {SelectorKind::kPrioritized, RemoverKind::kOldestFirst, 0},
      {SelectorKind::kUniform, RemoverKind::kOldestFirst, 0},
      {SelectorKind::kFifo, RemoverKind::kOldestFirst, 0},
      {SelectorKind::kLifo, RemoverKind::kOldestFirst, 0},
      {SelectorKind::kMaxHeap, RemoverKind::kOldestFirst, 0},
      {SelectorKind::kMinHeap, RemoverKind::kOldestFirst, 0},
      {SelectorKind::kPrioritized, RemoverKind::kLowestPriorityFirst, 0},
      {SelectorKind::kPrioritized, RemoverKind::kOldestFirst, 2},
      {SelectorKind::kFifo, RemoverKind::kOldestFirst, 1},
      {SelectorKind::kUniform, RemoverKind::kLowestPriorityFirst, 2},
      {SelectorKind::kMaxHeap, RemoverKind::kLowestPriorityFirst, 3},
      {SelectorKind::kLifo, RemoverKind::kLowestPriorityFirst, 1},
  };
  for (const auto& c : cases) {
    const ReplayOptions options = TableOptions(c.sampler, c.remover, c.max_times_sampled, 8);
    SCOPED_TRACE(fmt::format("{} remover {} max times {}", table::SelectorKindName(c.sampler),
                             static_cast<int>(c.remover), c.max_times_sampled));
    auto original = replay_test::MakeReplay(options);
    RunRounds(*original, 0, 7);
    const Snapshot snapshot = Take(*original);
    auto restored = replay_test::MakeReplay(options);
    const Status status = Restore(snapshot, *restored);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(RunRounds(*restored, 7, 20), RunRounds(*original, 7, 20));
  }
}

TEST(ReplayTableStateTest, SelectorStateMustNameEveryHeldItemOnce) {
  const ReplayOptions options = TableOptions(SelectorKind::kUniform, RemoverKind::kLowestPriorityFirst, 2, 8);
  auto original = replay_test::MakeReplay(options);
  RunRounds(*original, 0, 3);
  const Snapshot good = Take(*original);
  ASSERT_EQ(good.selectors.keys.size(), static_cast<size_t>(original->size()));
  const auto refused = [&options](Snapshot snapshot) {
    auto replay = replay_test::MakeReplay(options);
    return Restore(snapshot, *replay).code();
  };
  Snapshot repeated = good;
  repeated.selectors.sampler_order[1] = repeated.selectors.sampler_order[0];
  EXPECT_EQ(refused(repeated), Status::Code::kInvalidArgument);
  Snapshot short_order = good;
  short_order.selectors.remover_order.pop_back();
  EXPECT_EQ(refused(short_order), Status::Code::kInvalidArgument);
  Snapshot over_counted = good;
  over_counted.selectors.times_sampled[0] = 2;  // drawn its last time: it would have left
  EXPECT_EQ(refused(over_counted), Status::Code::kInvalidArgument);
  Snapshot bad_priority = good;
  bad_priority.selectors.priorities[0] = -1.0;
  EXPECT_EQ(refused(bad_priority), Status::Code::kInvalidArgument);
  EXPECT_EQ(refused(good), Status::Code::kOk);
  // The default options keep no selector state, and refuse some.
  EXPECT_TRUE(replay_test::MakeReplay(ReplayOptions{8, 0.6, tree::Device::kCpu, 1})->Selectors().keys.empty());
  auto plain = replay_test::MakeReplay(ReplayOptions{8, 0.6, tree::Device::kCpu, 1});
  EXPECT_EQ(plain->RestoreSelectors(good.selectors).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace perserve::replay
