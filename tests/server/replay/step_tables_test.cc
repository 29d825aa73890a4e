// Several tables over one step ring: each table must be exactly the replay
// of one table it would be alone. A random driver feeds one StepReplay of
// four tables (n-step with stacks, sequences with an item column,
// transitions drawn uniformly, a fifo queue of transitions each drawn at most
// twice) and, beside it, four StepReplays of one table
// each, with the same steps and each one's own items. After every append
// every table holds the same keys in the same slots as its twin, assembles
// every held item to the same bytes and draws the same samples: eviction
// takes every table's items with their steps (no held item of any table
// needs a step the ring no longer holds, draws that remove items included),
// and no table disturbs another.
// Then the refusals: a bad item in one table refuses the whole append,
// nothing changing in any table or the ring.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"

namespace perserve::replay::step_test {
namespace {

constexpr int kStreams = 2;
constexpr int64_t kRing = 40;

constexpr size_t kTables = 4;

std::vector<TableConfig> Tables() {
  std::vector<TableConfig> tables(kTables);
  tables[0].name = "apex";
  tables[0].layout.kind = StepOptions::Kind::kNStep;
  tables[0].layout.n_step = 3;
  tables[0].layout.discount = 0.9;
  tables[0].layout.stacks = {{"obs", 3}};
  tables[0].items = ReplayOptions{24, 0.6, tree::Device::kCpu, 7};
  tables[1].name = "r2d2";
  tables[1].layout.kind = StepOptions::Kind::kSequence;
  tables[1].layout.sequence_length = 5;
  tables[1].layout.sequence_period = 2;
  tables[1].layout.item_columns = {Column{"state", DType::kFloat32, {3}}};
  tables[1].items = ReplayOptions{10, 0.9, tree::Device::kCpu, 8};
  tables[2].name = "eval";
  tables[2].layout.kind = StepOptions::Kind::kTransition;
  tables[2].items = ReplayOptions{16, 1.0, tree::Device::kCpu, 9};
  tables[2].items.sampler = table::SelectorKind::kUniform;
  tables[3].name = "queue";
  tables[3].layout.kind = StepOptions::Kind::kTransition;
  tables[3].items = ReplayOptions{12, 1.0, tree::Device::kCpu, 10};
  tables[3].items.sampler = table::SelectorKind::kFifo;
  tables[3].items.max_times_sampled = 2;
  for (TableConfig& table : tables) {
    table.layout.step_capacity = kRing;
    table.layout.streams = kStreams;
  }
  return tables;
}

class TablesRun {
 public:
  explicit TablesRun(uint64_t seed) : rng_(seed), configs_(Tables()) {
    const Status made = StepReplay::Create(configs_, TestStepSchema(), &shared_);
    EXPECT_TRUE(made.ok()) << made.ToString();
    for (const TableConfig& config : configs_) {
      std::unique_ptr<StepReplay> alone;
      const Status one = StepReplay::Create({config}, TestStepSchema(), &alone);
      EXPECT_TRUE(one.ok()) << one.ToString();
      alone_.push_back(std::move(alone));
    }
  }

  int64_t Pick(int64_t low, int64_t high) { return std::uniform_int_distribution<int64_t>(low, high)(rng_); }

  // One step of TestStepSchema's columns, in the wire layout's per-column rows.
  std::vector<std::vector<std::byte>> RandomStep() {
    std::vector<std::vector<std::byte>> row;
    for (const Column& column : TestStepSchema().columns) {
      std::vector<std::byte> bytes(static_cast<size_t>(column.ItemBytes()));
      for (std::byte& b : bytes) b = std::byte{static_cast<uint8_t>(Pick(0, 255))};
      if (column.name == "reward") {
        const float reward = static_cast<float>(Pick(-4, 4));
        std::memcpy(bytes.data(), &reward, sizeof(reward));
      }
      if (column.name == "pos") {
        const double pos[2] = {static_cast<double>(Pick(0, 99)), 0.5};
        std::memcpy(bytes.data(), pos, sizeof(pos));
      }
      if (column.name == "done") {
        const int64_t roll = Pick(0, 19);
        bytes[0] = std::byte{static_cast<uint8_t>(roll < 2 ? 1 : roll < 3 ? 2 : 0)};
      }
      row.push_back(std::move(bytes));
    }
    return row;
  }

  // One random append to both sides; false once they differ.
  bool Append() {
    const int stream = static_cast<int>(Pick(0, kStreams - 1));
    const int64_t steps = Pick(0, 3) == 0 ? 0 : Pick(1, 6);
    std::vector<std::vector<std::vector<std::byte>>> rows;
    for (int64_t j = 0; j < steps; ++j) rows.push_back(RandomStep());
    const std::vector<std::byte> bulk = WireLayout(rows, TestStepSchema().columns.size());
    const int64_t first_step = shared_->stream_steps(stream);
    const store::StepBatch batch{steps, bulk, false};

    // Each table's items: steps its twin would take now (checked on the twin), none twice.
    std::vector<std::vector<int64_t>> item_steps(configs_.size());
    std::vector<std::vector<double>> priorities(configs_.size());
    std::vector<std::vector<std::byte>> item_columns(configs_.size());
    std::vector<TableItems> groups;
    for (size_t t = 0; t < configs_.size(); ++t) {
      StepReplay& alone = *alone_[t];
      const bool per_step = t >= 2 && steps > 0 && Pick(0, 2) == 0;
      const int64_t wanted = Pick(0, 3);
      for (int tries = 0; !per_step && tries < 12 && static_cast<int64_t>(item_steps[t].size()) < wanted; ++tries) {
        const int64_t candidate = Pick(std::max<int64_t>(0, first_step - 10), first_step + steps - 1);
        if (std::find(item_steps[t].begin(), item_steps[t].end(), candidate) != item_steps[t].end()) continue;
        const std::vector<std::byte> columns(static_cast<size_t>(alone.ItemColumnBytes()));
        const TableItems one{0, false, std::span<const int64_t>(&candidate, 1), {}, columns};
        if (alone.Prepare(AppendRequest{stream, first_step, batch, {&one, 1}}).ok()) {
          item_steps[t].push_back(candidate);
        }
      }
      const int64_t count = per_step ? steps : static_cast<int64_t>(item_steps[t].size());
      if (Pick(0, 1) == 0) {
        for (int64_t j = 0; j < count; ++j) priorities[t].push_back(0.1 * static_cast<double>(Pick(1, 50)));
      }
      item_columns[t].resize(static_cast<size_t>(count * alone.ItemColumnBytes()));
      for (std::byte& b : item_columns[t]) b = std::byte{static_cast<uint8_t>(Pick(0, 255))};
      if (count > 0) {
        groups.push_back(TableItems{static_cast<int>(t), per_step, item_steps[t], priorities[t], item_columns[t]});
        ++groups_given_[t];
      }
    }
    if (steps == 0 && groups.empty()) return true;
    std::shuffle(groups.begin(), groups.end(), rng_);  // the request's order of tables is free

    uint64_t first = 0;
    const Status shared = shared_->Append(AppendRequest{stream, first_step, batch, groups}, &first);
    EXPECT_TRUE(shared.ok()) << shared.ToString();
    if (!shared.ok()) return false;
    for (size_t t = 0; t < configs_.size(); ++t) {
      std::vector<TableItems> own;
      for (const TableItems& group : groups) {
        if (group.table == static_cast<int>(t)) own.push_back(TableItems{0, group.item_per_step, group.item_steps,
                                                                         group.priorities, group.item_columns});
      }
      if (steps == 0 && own.empty()) continue;
      const Status alone = alone_[t]->Append(AppendRequest{stream, first_step, batch, own}, &first);
      EXPECT_TRUE(alone.ok()) << configs_[t].name << ": " << alone.ToString();
      if (!alone.ok()) return false;
    }
    return Same();
  }

  // Every table against its twin: keys, slots, assembled bytes, a sample.
  bool Same() {
    for (size_t t = 0; t < configs_.size(); ++t) {
      const ItemTable& table = shared_->table(static_cast<int>(t));
      const Replay& mine = table.items();
      const Replay& twin = alone_[t]->items();
      EXPECT_EQ(mine.next_key(), twin.next_key()) << configs_[t].name;
      EXPECT_EQ(mine.size(), twin.size()) << configs_[t].name;
      std::vector<int64_t> slots;
      for (uint64_t key = 0; key < mine.next_key(); ++key) {
        EXPECT_EQ(mine.SlotOf(key), twin.SlotOf(key)) << configs_[t].name << " key " << key;
        if (mine.SlotOf(key) >= 0) slots.push_back(mine.SlotOf(key));
      }
      // Every held item's steps are in the ring: its step (its row's first column) at least.
      for (const int64_t slot : slots) {
        uint64_t step_key = 0;
        std::memcpy(&step_key, mine.store().Rows(0, slot, 1).data(), sizeof(step_key));
        EXPECT_GE(step_key, shared_->steps().oldest_key()) << configs_[t].name << " slot " << slot;
      }
      held_[t] = std::max<int64_t>(held_[t], static_cast<int64_t>(slots.size()));
      evicted_[t] = mine.next_key() - static_cast<uint64_t>(slots.size());
      std::vector<std::byte> got(slots.size() * static_cast<size_t>(table.SampleItemBytes()));
      std::vector<std::byte> want(got.size());
      table.Assemble(slots, got);
      alone_[t]->Assemble(slots, want);
      EXPECT_TRUE(got == want) << configs_[t].name << ": an item assembles otherwise than alone";
      if (!slots.empty()) {
        // Through the tables: the queue's draws remove items (their second draw).
        const int64_t batch = std::min<int64_t>(6, static_cast<int64_t>(slots.size()));
        SampleResult a, b;
        EXPECT_TRUE(shared_->mutable_table(static_cast<int>(t)).Sample(batch, 0.4, &a).ok());
        EXPECT_TRUE(alone_[t]->mutable_table(0).Sample(batch, 0.4, &b).ok());
        EXPECT_EQ(a.keys, b.keys) << configs_[t].name;
        EXPECT_EQ(a.weights, b.weights) << configs_[t].name;
        EXPECT_EQ(a.removed_slots, b.removed_slots) << configs_[t].name;
        drawn_out_[t] += static_cast<int64_t>(a.removed_slots.size());
      }
    }
    EXPECT_EQ(shared_->steps().held(), alone_[0]->steps().held());
    return !::testing::Test::HasFailure();
  }

  StepReplay& shared() { return *shared_; }
  int64_t held(size_t t) const { return held_[t]; }
  int64_t evicted(size_t t) const { return evicted_[t]; }
  int64_t groups_given(size_t t) const { return groups_given_[t]; }
  int64_t drawn_out(size_t t) const { return drawn_out_[t]; }

 private:
  std::mt19937_64 rng_;
  std::vector<TableConfig> configs_;
  std::unique_ptr<StepReplay> shared_;
  std::vector<std::unique_ptr<StepReplay>> alone_;
  int64_t held_[kTables] = {};
  uint64_t evicted_[kTables] = {};
  int64_t groups_given_[kTables] = {};
  int64_t drawn_out_[kTables] = {};
};

TEST(StepTablesTest, EveryTableOverTheSharedRingIsTheReplayItWouldBeAlone) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    TablesRun run(seed);
    for (int i = 0; i < 400; ++i) ASSERT_TRUE(run.Append()) << "seed " << seed << " append " << i;
    EXPECT_GT(run.drawn_out(3), 100) << "seed " << seed << ": the queue's items left by their draws";
    for (size_t t = 0; t < kTables; ++t) {
      // The run did what it is for: every table got items, held several and lost some with their steps.
      EXPECT_GT(run.groups_given(t), 20) << "seed " << seed << " table " << t;
      EXPECT_GT(run.held(t), 3) << "seed " << seed << " table " << t;
      EXPECT_GT(run.evicted(t), 3u) << "seed " << seed << " table " << t;
    }
  }
}

// The state a refused append must leave alone: the ring's and every table's.
struct State {
  uint64_t next_step = 0;
  std::vector<int64_t> stream_steps;
  std::vector<uint64_t> next_keys;
  std::vector<int64_t> sizes;
  static State Of(const StepReplay& replay) {
    State s;
    s.next_step = replay.next_step_key();
    for (int i = 0; i < kStreams; ++i) s.stream_steps.push_back(replay.stream_steps(i));
    for (int t = 0; t < replay.tables(); ++t) {
      s.next_keys.push_back(replay.table(t).items().next_key());
      s.sizes.push_back(replay.table(t).items().size());
    }
    return s;
  }
  bool operator==(const State&) const = default;
};

class StepTablesRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TablesRun run(99);  // for its random steps
    ASSERT_TRUE(StepReplay::Create(Tables(), TestStepSchema(), &replay_).ok());
    // Six steps of one episode on stream 0, no items yet.
    std::vector<std::vector<std::vector<std::byte>>> rows;
    for (int j = 0; j < 6; ++j) {
      rows.push_back(run.RandomStep());
      rows.back()[3][0] = std::byte{0};  // done: the episode goes on
    }
    bulk_ = WireLayout(rows, TestStepSchema().columns.size());
    uint64_t first = 0;
    ASSERT_TRUE(replay_->Append(AppendRequest{0, 0, store::StepBatch{6, bulk_, false}}, &first).ok());
    before_ = State::Of(*replay_);
  }

  void ExpectRefused(std::span<const TableItems> groups, const std::string& fragment,
                     Status::Code code = Status::Code::kInvalidArgument) {
    uint64_t first = 0;
    const Status status = replay_->Append(AppendRequest{0, 6, store::StepBatch{}, groups}, &first);
    EXPECT_EQ(status.code(), code) << status.ToString();
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.ToString() << " lacks " << fragment;
    EXPECT_TRUE(State::Of(*replay_) == before_) << "after " << status.ToString();
  }

  std::unique_ptr<StepReplay> replay_;
  std::vector<std::byte> bulk_;
  State before_;
};

TEST_F(StepTablesRefusalTest, ABadItemInOneTableRefusesTheWholeAppend) {
  const int64_t good = 1, open = 5;  // step 5's n-step successor is not appended yet
  const std::vector<std::byte> state(12);
  const TableItems groups[] = {TableItems{2, false, std::span<const int64_t>(&good, 1)},
                               TableItems{0, false, std::span<const int64_t>(&open, 1)}};
  ExpectRefused(groups, "table apex: item 0 over step 5 of stream 0");
  // The sequence table's item without its item column's bytes.
  const int64_t start = 0;  // a sequence of 5 from the episode's start
  const TableItems no_state[] = {TableItems{1, false, std::span<const int64_t>(&start, 1)}};
  ExpectRefused(no_state, "table r2d2: 1 items must carry 12 bytes of item columns");
  const TableItems with_state[] = {TableItems{1, false, std::span<const int64_t>(&start, 1), {}, state},
                                   TableItems{2, false, std::span<const int64_t>(&good, 1)}};
  uint64_t first = 0;
  const Status appended = replay_->Append(AppendRequest{0, 6, store::StepBatch{}, with_state}, &first);
  EXPECT_TRUE(appended.ok()) << appended.ToString();
  EXPECT_EQ(replay_->table(1).items().size(), 1);
  EXPECT_EQ(replay_->table(2).items().size(), 1);
  EXPECT_EQ(replay_->first_item_keys(), (std::vector<uint64_t>{0, 0})) << "each table's keys are its own";
}

TEST_F(StepTablesRefusalTest, UnknownOrRepeatedTablesAndAddsToStepTablesAreRefused) {
  const int64_t good = 1;
  const TableItems unknown4[] = {TableItems{4, false, std::span<const int64_t>(&good, 1)}};
  ExpectRefused(unknown4, "table 4 is outside [0, 4): this server's tables are apex, r2d2, eval, queue");
  const TableItems twice[] = {TableItems{2, false, std::span<const int64_t>(&good, 1)},
                              TableItems{2, false, std::span<const int64_t>(&good, 1)}};
  ExpectRefused(twice, "gives table eval items twice");
  // An add (one item per step) is for a table of transitions only.
  const TableItems add_to_apex[] = {TableItems{0, true}};
  uint64_t first = 0;
  const Status add = replay_->Append(AppendRequest{0, AppendRequest::kAtEnd, store::StepBatch{6, bulk_, false},
                                                   add_to_apex},
                                     &first);
  EXPECT_EQ(add.code(), Status::Code::kFailedPrecondition) << add.ToString();
  EXPECT_NE(add.message().find("table apex: this table's items are n-step"), std::string::npos) << add.ToString();
  EXPECT_TRUE(State::Of(*replay_) == before_);
  // An add to the table of transitions goes at the stream's end.
  const TableItems add_to_eval[] = {TableItems{2, true}};
  ASSERT_TRUE(replay_->Append(AppendRequest{0, AppendRequest::kAtEnd, store::StepBatch{6, bulk_, false},
                                            add_to_eval},
                              &first)
                  .ok());
  EXPECT_EQ(replay_->table(2).items().size(), 6);
  EXPECT_EQ(replay_->stream_steps(0), 12);
}

TEST(StepTablesCreateTest, TablesMustHaveNamesOfTheirOwnAndShareTheRing) {
  std::unique_ptr<StepReplay> replay;
  std::vector<TableConfig> tables = Tables();
  tables[2].name = "apex";
  Status status = StepReplay::Create(tables, TestStepSchema(), &replay);
  EXPECT_NE(status.message().find("table apex: two tables have this name"), std::string::npos) << status.ToString();
  tables = Tables();
  tables[1].name = "";
  status = StepReplay::Create(tables, TestStepSchema(), &replay);
  EXPECT_NE(status.message().find("table 1 has no name"), std::string::npos) << status.ToString();
  tables = Tables();
  tables[1].layout.step_capacity = 64;
  status = StepReplay::Create(tables, TestStepSchema(), &replay);
  EXPECT_NE(status.message().find("differ from the first table's"), std::string::npos) << status.ToString();
  tables = Tables();
  tables[1].layout.sequence_period = 9;
  status = StepReplay::Create(tables, TestStepSchema(), &replay);
  EXPECT_NE(status.message().find("table r2d2: sequence period 9"), std::string::npos) << status.ToString();
  status = StepReplay::Create(std::vector<TableConfig>{}, TestStepSchema(), &replay);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(StepReplay::Create(Tables(), TestStepSchema(), &replay).ok());
  EXPECT_EQ(replay->tables(), 4);
  EXPECT_EQ(replay->TableIndex("r2d2"), 1);
  EXPECT_EQ(replay->TableIndex("nope"), -1);
  EXPECT_TRUE(replay->steps().episodic());
}

}  // namespace
}  // namespace perserve::replay::step_test
