// Checkpoints of several tables (format 4). A StepReplay of four tables over
// one ring (n-step items under the lowest-priority remover, sequences drawn
// from a max-heap, transitions drawn uniformly, a fifo queue whose items
// leave after two draws) is driven by random appends, draws and priority
// updates; its twin gets the same until the checkpoint begins. The
// checkpoint is written while the original goes on (appends through
// BeforeCommit, draws that remove queue items whose slots later appends
// take). Restored into a fresh replay, it must hold exactly what the twin
// holds (every table's keys, slots, leaves, rows, state, selectors and free
// slots, the ring), and then, driven alike, both must draw the same keys and
// weights from every table. Then the refusals of a server whose tables
// differ, each naming the table and both values.
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"
#include "server/service/checkpoint/checkpoint_test_util.h"

namespace perserve::service {
namespace {

using checkpoint_test::CheckpointTest;
using replay::AppendRequest;
using replay::ReplayOptions;
using replay::SampleResult;
using replay::StepOptions;
using replay::StepReplay;
using replay::TableConfig;
using replay::TableItems;
using replay::step_test::TestStepSchema;
namespace fs = std::filesystem;

constexpr int kStreams = 2;
constexpr int64_t kRing = 40;

std::vector<TableConfig> Tables() {
  std::vector<TableConfig> tables(4);
  tables[0].name = "apex";
  tables[0].layout.kind = StepOptions::Kind::kNStep;
  tables[0].layout.n_step = 3;
  tables[0].layout.discount = 0.9;
  tables[0].layout.stacks = {{"obs", 3}};
  tables[0].items = ReplayOptions{24, 0.6, tree::Device::kCpu, 7};
  tables[0].items.remover = replay::RemoverKind::kLowestPriorityFirst;
  tables[1].name = "r2d2";
  tables[1].layout.kind = StepOptions::Kind::kSequence;
  tables[1].layout.sequence_length = 5;
  tables[1].layout.sequence_period = 2;
  tables[1].layout.item_columns = {Column{"state", DType::kFloat32, {3}}};
  tables[1].items = ReplayOptions{10, 0.9, tree::Device::kCpu, 8};
  tables[1].items.sampler = table::SelectorKind::kMaxHeap;
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

std::unique_ptr<StepReplay> Make(const std::vector<TableConfig>& tables = Tables()) {
  std::unique_ptr<StepReplay> replay;
  const Status made = StepReplay::Create(tables, TestStepSchema(), &replay);
  EXPECT_TRUE(made.ok()) << made.ToString();
  return replay;
}

// What a draw gave: per table drawn, its keys, weights and removed slots.
struct Draw {
  int table = 0;
  std::vector<uint64_t> keys;
  std::vector<double> weights;
  std::vector<int64_t> removed;
  bool operator==(const Draw& other) const {
    return table == other.table && keys == other.keys && removed == other.removed &&
           std::memcmp(weights.data(), other.weights.data(), weights.size() * sizeof(double)) == 0;
  }
};

// Random rounds; the same on two replays alike from the same seed.
class Driver {
 public:
  explicit Driver(uint64_t seed) : rng_(seed) {}

  int64_t Pick(int64_t low, int64_t high) { return std::uniform_int_distribution<int64_t>(low, high)(rng_); }

  // One append (steps of one stream, items in any of the tables, through
  // `writer`'s BeforeCommit when given), then a draw from each table now
  // and then, and priority updates of the heap's and the prioritized
  // table's drawn keys. Each draw goes to *draws. `end`: every step ends
  // its episode.
  void Round(StepReplay* replay, CheckpointWriter* writer, std::vector<Draw>* draws, bool end = false) {
    const int stream = static_cast<int>(Pick(0, kStreams - 1));
    const int64_t steps = Pick(1, 4);
    std::vector<std::vector<std::vector<std::byte>>> rows;
    for (int64_t j = 0; j < steps; ++j) {
      std::vector<std::vector<std::byte>> row;
      for (const Column& column : TestStepSchema().columns) {
        std::vector<std::byte> bytes(static_cast<size_t>(column.ItemBytes()));
        for (std::byte& b : bytes) b = std::byte{static_cast<uint8_t>(Pick(0, 255))};
        if (column.name == "reward") {
          const float reward = static_cast<float>(Pick(-4, 4));
          std::memcpy(bytes.data(), &reward, sizeof(reward));
        } else if (column.name == "pos") {
          const double pos[2] = {static_cast<double>(Pick(0, 99)), 0.5};
          std::memcpy(bytes.data(), pos, sizeof(pos));
        } else if (column.name == "done") {
          bytes[0] = std::byte{static_cast<uint8_t>(end || Pick(0, 9) == 0 ? 1 : 0)};
        }
        row.push_back(std::move(bytes));
      }
      rows.push_back(std::move(row));
    }
    const std::vector<std::byte> bulk = replay::step_test::WireLayout(rows, TestStepSchema().columns.size());
    const int64_t first_step = replay->stream_steps(stream);
    const store::StepBatch batch{steps, bulk, false};
    std::vector<std::vector<int64_t>> item_steps(static_cast<size_t>(replay->tables()));
    std::vector<std::vector<double>> priorities(item_steps.size());
    std::vector<std::vector<std::byte>> columns(item_steps.size());
    std::vector<TableItems> groups;
    for (int t = 0; t < replay->tables(); ++t) {
      const size_t i = static_cast<size_t>(t);
      const int64_t column_bytes = replay->table(t).ItemColumnBytes();
      for (int tries = 0; tries < 8; ++tries) {
        const int64_t candidate = Pick(std::max<int64_t>(0, first_step - 8), first_step + steps - 1);
        if (std::find(item_steps[i].begin(), item_steps[i].end(), candidate) != item_steps[i].end()) continue;
        const std::vector<std::byte> one_column(static_cast<size_t>(column_bytes));
        const TableItems one{t, false, std::span<const int64_t>(&candidate, 1), {}, one_column};
        if (replay->Prepare(AppendRequest{stream, first_step, batch, {&one, 1}}).ok()) {
          item_steps[i].push_back(candidate);
        }
      }
      if (item_steps[i].empty()) continue;
      for (size_t j = 0; j < item_steps[i].size(); ++j) priorities[i].push_back(0.1 * static_cast<double>(Pick(1, 60)));
      columns[i].resize(item_steps[i].size() * static_cast<size_t>(column_bytes));
      for (std::byte& b : columns[i]) b = std::byte{static_cast<uint8_t>(Pick(0, 255))};
      groups.push_back(TableItems{t, false, item_steps[i], priorities[i], columns[i]});
    }
    uint64_t first_key = 0;
    const Status appended = checkpoint_test::AppendDuringCheckpoint(
        replay, AppendRequest{stream, first_step, batch, groups}, writer, &first_key);
    ASSERT_TRUE(appended.ok()) << appended.ToString();

    for (int t = 0; t < replay->tables(); ++t) {
      replay::ItemTable& table = replay->mutable_table(t);
      const int64_t size = table.items().size();
      if (size == 0 || Pick(0, 1) == 0) continue;
      int64_t batch_size = Pick(1, std::min<int64_t>(4, size));
      if (table.items().draws_left() >= 0) batch_size = std::min(batch_size, table.items().draws_left());
      if (batch_size == 0) continue;
      SampleResult sample;
      const Status drawn = table.Sample(batch_size, 0.4, &sample);
      ASSERT_TRUE(drawn.ok()) << table.name() << ": " << drawn.ToString();
      draws->push_back(Draw{t, sample.keys, sample.weights, sample.removed_slots});
      const table::SelectorKind sampler = table.items().options().sampler;
      if (sampler == table::SelectorKind::kPrioritized || sampler == table::SelectorKind::kMaxHeap) {
        std::vector<double> updated;
        for (size_t j = 0; j < sample.keys.size(); ++j) updated.push_back(0.05 * static_cast<double>(Pick(1, 90)));
        replay::UpdateCounts counts;
        ASSERT_TRUE(table.mutable_items().UpdatePriorities(sample.keys, updated, &counts).ok());
      }
    }
  }

  // Every stream's episode ends: a restored stream and the uninterrupted one
  // then both begin a new one.
  void EndEpisodes(StepReplay* replay, CheckpointWriter* writer = nullptr) {
    std::vector<Draw> ignored;
    for (int s = 0; s < kStreams; ++s) {
      while (true) {
        // Rounds pick their stream: repeat until stream s has ended.
        Round(replay, writer, &ignored, /*end=*/true);
        if (replay->steps().next_episode_start(s) == replay->stream_steps(s)) break;
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// Everything one table holds, bit for bit.
void ExpectSameTable(const replay::ItemTable& a, const replay::ItemTable& b) {
  const replay::Replay& x = a.items();
  const replay::Replay& y = b.items();
  const std::string name = a.name();
  ASSERT_EQ(x.slots_used(), y.slots_used()) << name;
  EXPECT_EQ(x.size(), y.size()) << name;
  EXPECT_EQ(x.draws_left(), y.draws_left()) << name;
  const replay::ReplayState sx = x.State(), sy = y.State();
  EXPECT_EQ(sx.next_key, sy.next_key) << name;
  EXPECT_EQ(std::memcmp(&sx.max_priority, &sy.max_priority, sizeof(double)), 0) << name;
  EXPECT_EQ(sx.seed, sy.seed) << name;
  EXPECT_EQ(sx.samples_drawn, sy.samples_drawn) << name;
  EXPECT_EQ(sx.counters.items_added, sy.counters.items_added) << name;
  EXPECT_EQ(sx.counters.items_sampled, sy.counters.items_sampled) << name;
  EXPECT_EQ(sx.counters.priorities_updated, sy.counters.priorities_updated) << name;
  const replay::SelectorState lx = x.Selectors(), ly = y.Selectors();
  EXPECT_EQ(lx.keys, ly.keys) << name;
  EXPECT_EQ(lx.priorities, ly.priorities) << name;
  EXPECT_EQ(lx.times_sampled, ly.times_sampled) << name;
  EXPECT_EQ(lx.sampler_order, ly.sampler_order) << name;
  EXPECT_EQ(lx.remover_order, ly.remover_order) << name;
  EXPECT_TRUE(std::equal(x.free_slots().begin(), x.free_slots().end(), y.free_slots().begin(), y.free_slots().end()))
      << name << ": free slots";
  for (int64_t slot = 0; slot < x.slots_used(); ++slot) {
    ASSERT_EQ(x.KeyAt(slot), y.KeyAt(slot)) << name << " slot " << slot;
    if (x.KeyAt(slot) == replay::Replay::kNoKey) continue;
    const double leaf_x = replay::step_test::Leaf(x, slot), leaf_y = replay::step_test::Leaf(y, slot);
    EXPECT_EQ(std::memcmp(&leaf_x, &leaf_y, sizeof(double)), 0) << name << " slot " << slot;
    std::vector<std::byte> stored_x(static_cast<size_t>(x.store().schema().ItemBytes())), stored_y(stored_x.size());
    x.store().Gather(std::span<const int64_t>(&slot, 1), stored_x);
    y.store().Gather(std::span<const int64_t>(&slot, 1), stored_y);
    EXPECT_EQ(stored_x, stored_y) << name << " slot " << slot;
    std::vector<std::byte> sample_x(static_cast<size_t>(a.SampleItemBytes())), sample_y(sample_x.size());
    a.Assemble(std::span<const int64_t>(&slot, 1), sample_x);
    b.Assemble(std::span<const int64_t>(&slot, 1), sample_y);
    EXPECT_EQ(sample_x, sample_y) << name << " slot " << slot;
  }
  checkpoint_test::ExpectSameNodes(x, y);
}

void ExpectSameTables(const StepReplay& a, const StepReplay& b, bool a_restored) {
  ASSERT_EQ(a.tables(), b.tables());
  for (int t = 0; t < a.tables(); ++t) ExpectSameTable(a.table(t), b.table(t));
  checkpoint_test::ExpectSameRing(checkpoint_test::Ring(a), checkpoint_test::Ring(b), "the rings", a_restored);
}

class TableCheckpointTest : public CheckpointTest {
 protected:
  // Drives the original and its twin alike, then checkpoints the original
  // while it goes on; the twin stays as the replay was at Begin.
  void SetUp() override {
    CheckpointTest::SetUp();
    original_ = Make();
    twin_ = Make();
    Driver a(21), b(21);
    std::vector<Draw> draws_a, draws_b;
    for (int round = 0; round < 150; ++round) {
      a.Round(original_.get(), nullptr, &draws_a);
      b.Round(twin_.get(), nullptr, &draws_b);
    }
    a.EndEpisodes(original_.get());
    b.EndEpisodes(twin_.get());
    ASSERT_TRUE(draws_a == draws_b);
    for (int t = 0; t < original_->tables(); ++t) ASSERT_GT(original_->table(t).items().size(), 0) << t;

    CheckpointWriter writer(dir_.string(), 0, 1, std::vector<int64_t>{24, 10, 16, 12});
    Driver during(99);
    std::vector<Draw> draws_during;
    const Status written = checkpoint_test::Write(&writer, original_.get(), [&] {
      for (int round = 0; round < 12; ++round) during.Round(original_.get(), &writer, &draws_during);
    });
    ASSERT_TRUE(written.ok()) << written.ToString();
    path_ = writer.last_path();
    // The appends meanwhile took slots held at Begin in every table, the
    // queue's those its draws emptied among them: copy on write was needed.
    for (int t = 0; t < original_->tables(); ++t) {
      const replay::Replay& now = original_->table(t).items();
      const replay::Replay& then = twin_->table(t).items();
      int64_t taken = 0;
      for (int64_t slot = 0; slot < then.slots_used(); ++slot) {
        taken += then.KeyAt(slot) != replay::Replay::kNoKey && now.KeyAt(slot) != then.KeyAt(slot) &&
                 now.KeyAt(slot) != replay::Replay::kNoKey;
      }
      EXPECT_GT(taken, 0) << original_->table(t).name() << ": no slot held at Begin was taken while writing";
    }
    int64_t drawn_out = 0;
    for (const Draw& draw : draws_during) drawn_out += draw.table == 3 ? static_cast<int64_t>(draw.removed.size()) : 0;
    EXPECT_GT(drawn_out, 0) << "no queue item left by its draws while the checkpoint was written";
  }

  Status Load(StepReplay* into, CheckpointState* state = nullptr) {
    return checkpoint_test::Restore(path_, into, state);
  }

  std::unique_ptr<StepReplay> original_, twin_;
  std::string path_;
};

TEST_F(TableCheckpointTest, EveryTableRestoresBitExactAndDrawsWhatTheUninterruptedReplayDraws) {
  auto restored = Make();
  CheckpointState state;
  const Status loaded = Load(restored.get(), &state);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  ASSERT_EQ(state.tables.size(), 4u);
  EXPECT_EQ(state.tables[3].name, "queue");
  EXPECT_EQ(state.tables[0].limiter.inserted, 123) << "table 0's limiter: the writer's state";
  ExpectSameTables(*restored, *twin_, /*a_restored=*/true);

  // Driven alike, both draw the same from every table: keys, weights, the
  // queue's removals; and hold the same after.
  Driver a(5), b(5);
  std::vector<Draw> draws_a, draws_b;
  for (int round = 0; round < 120; ++round) {
    a.Round(restored.get(), nullptr, &draws_a);
    b.Round(twin_.get(), nullptr, &draws_b);
    ASSERT_EQ(draws_a.size(), draws_b.size()) << "round " << round;
    ASSERT_TRUE(draws_a.empty() || draws_a.back() == draws_b.back()) << "round " << round << ": table "
                                                                      << draws_a.back().table;
  }
  int tables_drawn[4] = {};
  for (const Draw& draw : draws_a) ++tables_drawn[draw.table];
  for (int t = 0; t < 4; ++t) EXPECT_GT(tables_drawn[t], 10) << t;
  ExpectSameTables(*restored, *twin_, /*a_restored=*/false);
}

// Each table's limiter goes through the checkpoint; the service takes them back.
TEST_F(TableCheckpointTest, EveryTablesRateLimiterIsKept) {
  CheckpointState given = checkpoint_test::StateOf();
  for (int t = 0; t < 4; ++t) {
    given.tables.push_back(TableCheckpointState{{}, {}, 0, {}, RateLimiterState{10 + t, 3 * t, t % 2 == 1, -1.0, 2.0 + t}});
  }
  CheckpointWriter writer((dir_ / "limiters").string(), 0, 1);
  ASSERT_TRUE(writer.Begin(*twin_, given).ok());
  bool done = false;
  while (!done) ASSERT_TRUE(writer.Step(*twin_, std::chrono::microseconds(100), &done).ok());
  auto restored = Make();
  CheckpointState state;
  ASSERT_TRUE(checkpoint_test::Restore(writer.last_path(), restored.get(), &state).ok());
  ASSERT_EQ(state.tables.size(), 4u);
  for (int t = 0; t < 4; ++t) {
    const RateLimiterState& limiter = state.tables[static_cast<size_t>(t)].limiter;
    EXPECT_EQ(limiter.inserted, 10 + t);
    EXPECT_EQ(limiter.sampled, 3 * t);
    EXPECT_EQ(limiter.observed, t % 2 == 1);
    EXPECT_EQ(limiter.highest, 2.0 + t);
  }
}

void ExpectRefused(const Status& status, Status::Code code, std::initializer_list<std::string> mentions) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  for (const std::string& mention : mentions) {
    EXPECT_NE(status.message().find(mention), std::string::npos)
        << "\"" << status.message() << "\" lacks \"" << mention << "\"";
  }
}

// A server whose tables differ from the checkpoint's: refused before
// anything is restored, naming the table and both values.
TEST_F(TableCheckpointTest, AServerOfOtherTablesIsRefusedNamingTheTableAndBothValues) {
  const auto load = [&](const std::vector<TableConfig>& tables) {
    auto into = Make(tables);
    return Load(into.get());
  };
  std::vector<TableConfig> fewer = Tables();
  fewer.pop_back();
  ExpectRefused(load(fewer), Status::Code::kFailedPrecondition,
                {"holds 4 table(s) (apex, r2d2, eval, queue); this server has 3 (apex, r2d2, eval)"});
  std::vector<TableConfig> swapped = Tables();
  std::swap(swapped[2], swapped[3]);
  ExpectRefused(load(swapped), Status::Code::kFailedPrecondition,
                {"table 2 is eval in the checkpoint and queue on this server"});
  std::vector<TableConfig> renamed = Tables();
  renamed[1].name = "r2d3";
  ExpectRefused(load(renamed), Status::Code::kFailedPrecondition, {"table 1 is r2d2 in the checkpoint and r2d3"});
  std::vector<TableConfig> sampler = Tables();
  sampler[3].items.sampler = table::SelectorKind::kLifo;
  ExpectRefused(load(sampler), Status::Code::kFailedPrecondition,
                {"table queue was written with sampler=fifo; this server's table queue has sampler=lifo"});
  std::vector<TableConfig> times = Tables();
  times[3].items.max_times_sampled = 1;
  ExpectRefused(load(times), Status::Code::kFailedPrecondition, {"max_times_sampled=2", "max_times_sampled=1"});
  std::vector<TableConfig> remover = Tables();
  remover[0].items.remover = replay::RemoverKind::kOldestFirst;
  ExpectRefused(load(remover), Status::Code::kFailedPrecondition,
                {"table apex was written with remover=min_heap", "remover=fifo"});
  std::vector<TableConfig> capacity = Tables();
  capacity[2].items.capacity = 17;
  ExpectRefused(load(capacity), Status::Code::kFailedPrecondition, {"table eval", "max_items=16", "max_items=17"});
  std::vector<TableConfig> layout = Tables();
  layout[1].layout.sequence_length = 6;
  ExpectRefused(load(layout), Status::Code::kFailedPrecondition, {"table r2d2", "sequence_length=5", "sequence_length=6"});
  std::vector<TableConfig> alpha = Tables();
  alpha[0].items.alpha = 0.5;
  ExpectRefused(load(alpha), Status::Code::kFailedPrecondition, {"table apex", "alpha=0.6", "alpha=0.5"});
  EXPECT_TRUE(load(Tables()).ok());
}

// A selectors part from outside (its hash made to match) that does not name
// the held keys: refused, naming the table's file.
TEST_F(TableCheckpointTest, ForgedSelectorsAreRefusedNamingTheTablesFile) {
  const std::string name = checkpoint_layout::TablePart(1, checkpoint_layout::kSelectorsFile);
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(replay::SelectorState{});
  }
  checkpoint_test::ForgePart(path_, name, bytes.str());
  auto into = Make();
  ExpectRefused(Load(into.get()), Status::Code::kInvalidArgument, {name + ": selector state of 0 keys"});
}

// Formats 1 to 3 hold one table of the default selectors: a server of
// other tables refuses them, before their flags.
TEST_F(TableCheckpointTest, AnOlderFormatIsRefusedByAServerOfSeveralTables) {
  const fs::path format2 = fs::path(PERSERVE_TEST_DATA) / "checkpoints" / "format2-nstep";
  auto into = Make();
  ExpectRefused(checkpoint_test::Restore(format2.string(), into.get()), Status::Code::kFailedPrecondition,
                {"(format 2) holds one table", "this server has 4 table(s) (apex, r2d2, eval, queue)"});
}

}  // namespace
}  // namespace perserve::service
