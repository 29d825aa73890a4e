// StepReplay against a plain reference (step_reference.h): random streams
// interleaved, random episode lengths (1-step episodes too), n-step items and
// sequences over stacked columns, random batch sizes, a ring small enough to
// wrap many times, an items' table small enough to fill. At many moments
// every item ever created is checked: held exactly when the reference says
// (the one item model: it leaves when its earliest step leaves the ring, or
// when the table is full, the oldest first), and, when held, its assembled
// sample bit for bit the reference's. Random invalid items (one over a step
// that has an item already among them) are refused with nothing changed.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "server/replay/step_reference.h"
#include "server/replay/step_test_util.h"

namespace perserve::replay::step_test {
namespace {

struct Workload {
  StepOptions options;
  Schema schema;
  int64_t item_capacity = 0;
};

// One random configuration: kind, n, discount, stacks, L and P, item
// columns, capacities (the ring only a little longer than an item's span).
Workload RandomWorkload(std::mt19937_64& rng) {
  const auto pick = [&rng](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  Workload w;
  w.schema = TestStepSchema(pick(0, 1) == 0 ? DType::kFloat32 : DType::kFloat64);
  StepOptions& o = w.options;
  o.kind = pick(0, 1) == 0 ? StepOptions::Kind::kNStep : StepOptions::Kind::kSequence;
  o.streams = static_cast<int>(pick(2, 3));
  int span = 0;
  const int obs_depth = static_cast<int>(pick(1, 4));
  if (o.kind == StepOptions::Kind::kNStep) {
    o.n_step = static_cast<int>(pick(1, 5));
    const int64_t discount_kind = pick(0, 5);
    o.discount = discount_kind == 0 ? 0.0 : discount_kind == 1 ? 1.0 : std::uniform_real_distribution(0.0, 1.0)(rng);
    if (pick(0, 4) != 0) o.stacks.emplace_back("obs", obs_depth);  // else obs:1 by default
  } else {
    o.sequence_length = static_cast<int>(pick(1, 6));
    o.sequence_period = static_cast<int>(pick(1, o.sequence_length));
    if (pick(0, 2) != 0) o.stacks.emplace_back("obs", obs_depth);
  }
  if (pick(0, 2) == 0) o.stacks.emplace_back("pos", static_cast<int>(pick(1, 3)));      // 8-byte elements
  if (pick(0, 3) == 0) o.stacks.emplace_back("action", static_cast<int>(pick(2, 3)));  // 4-byte elements
  int depth = 1;
  for (const auto& stack : o.stacks) depth = std::max(depth, stack.second);
  span = o.kind == StepOptions::Kind::kNStep ? o.n_step + depth : o.sequence_length + depth - 1;
  o.step_capacity = span + (pick(0, 3) == 0 ? pick(0, 2) : pick(3, 40));
  if (pick(0, 1) == 0) o.item_columns.push_back(Column{"state", DType::kFloat32, {3}});
  w.item_capacity = pick(4, 48);
  return w;
}

// What a run exercised, so the test can insist it exercised enough.
struct Coverage {
  int64_t items = 0;         // created
  int64_t live_checked = 0;  // held items assembled and compared
  int64_t removed_seen = 0;  // items found gone, as expected
  int64_t pushed_out = 0;    // items the table's FIFO remover took (full)
  int64_t refused = 0;       // invalid items refused
  int64_t twice = 0;         // of them, items over a step that has one already
  int64_t stale = 0;         // updates to removed items counted stale
  int64_t truncated = 0;     // items created over a truncated episode's bootstrap step
  void Add(const Coverage& o) {
    truncated += o.truncated;
    items += o.items;
    live_checked += o.live_checked;
    removed_seen += o.removed_seen;
    pushed_out += o.pushed_out;
    refused += o.refused;
    twice += o.twice;
    stale += o.stale;
  }
};

class StepExactnessRun {
 public:
  const Coverage& coverage() const { return coverage_; }

  StepExactnessRun(const Workload& w, uint64_t seed)
      : w_(w), reference_(w.options, w.schema), rng_(seed), episode_left_(static_cast<size_t>(w.options.streams), 0) {
    const Status made = MakeStepReplay(w.options, w.schema, w.item_capacity, &fixture_);
    EXPECT_TRUE(made.ok()) << made.ToString();
    Schema stored;
    EXPECT_TRUE(StepSchemas(w.options, w.schema, &sample_schema_, &stored).ok());
  }

  int64_t Pick(int64_t low, int64_t high) { return std::uniform_int_distribution<int64_t>(low, high)(rng_); }

  // One request from a random stream; returns false once a check failed.
  bool Request() {
    const int stream = static_cast<int>(Pick(0, w_.options.streams - 1));
    const int64_t steps = std::min<int64_t>(Pick(0, 3) == 0 ? 0 : Pick(1, 7), w_.options.step_capacity);
    std::vector<std::vector<std::vector<std::byte>>> rows;
    for (int64_t j = 0; j < steps; ++j) rows.push_back(RandomStep(stream));
    const int64_t first_step = reference_.steps(stream);
    reference_.Append(stream, rows);
    const std::vector<std::byte> bulk = WireLayout(rows, w_.schema.columns.size());

    // Items: up to 4 creatable steps among the stream's recent ones, each
    // without an item yet (one item a step), none twice.
    const int64_t have = reference_.steps(stream);
    const uint64_t oldest_after = reference_.OldestKeyAfter(0);
    std::vector<int64_t> item_steps;
    const int64_t wanted = Pick(0, 4);
    for (int tries = 0; tries < 20 && static_cast<int64_t>(item_steps.size()) < wanted; ++tries) {
      const int64_t t = Pick(std::max<int64_t>(0, have - 14), have - 1);
      if (reference_.Creatable(stream, t, oldest_after) && !reference_.ItemOver(stream, t) &&
          std::find(item_steps.begin(), item_steps.end(), t) == item_steps.end()) {
        item_steps.push_back(t);
      }
    }
    std::vector<double> priorities;
    if (Pick(0, 1) == 0) {
      for (size_t j = 0; j < item_steps.size(); ++j) priorities.push_back(std::uniform_real_distribution(0.1, 5.0)(rng_));
    }
    std::vector<std::vector<std::vector<std::byte>>> item_rows;
    for (size_t j = 0; j < item_steps.size(); ++j) item_rows.push_back(RandomItemColumns());
    const std::vector<std::byte> item_bulk = WireLayout(item_rows, w_.options.item_columns.size());

    if (Pick(0, 3) == 0 && !TryInvalidItem(stream, first_step, steps, bulk, have, oldest_after)) return false;
    if (steps == 0 && item_steps.empty()) return true;  // an append of nothing is refused (CheckCounts)

    uint64_t first_key = 0;
    const Status appended = fixture_.steps->Append(stream, first_step, steps, bulk, item_steps, priorities,
                                                   item_bulk, &first_key);
    EXPECT_TRUE(appended.ok()) << appended.ToString();
    if (!appended.ok()) return false;
    coverage_.items += static_cast<int64_t>(item_steps.size());
    reference_.RemoveItemsBeforeAdd(static_cast<int64_t>(item_steps.size()), w_.item_capacity);
    const int64_t reach = w_.options.kind == StepOptions::Kind::kNStep ? w_.options.n_step : w_.options.sequence_length - 1;
    for (size_t j = 0; j < item_steps.size(); ++j) {
      for (int64_t i = item_steps[j] + 1; i <= std::min(item_steps[j] + reach, have - 1); ++i) {
        if (reference_.Bootstrap(stream, i)) ++coverage_.truncated;
        if (reference_.Done(stream, i)) break;
      }
      reference_.AddItem(first_key + j, RefItem{stream, item_steps[j], item_rows[j]});
    }
    return true;
  }

  // Every item ever created: held exactly when the reference says (never
  // one with a step out of the ring), and its sample the reference's; a
  // sampled batch assembled at once too.
  bool CheckEverything() {
    const Replay& items = *fixture_.items;
    const uint64_t oldest_step = reference_.OldestKeyAfter(0);
    EXPECT_EQ(fixture_.steps->next_step_key(), reference_.next_key());
    int64_t live = 0;
    for (uint64_t key = 0; key < items.next_key(); ++key) {
      const int64_t slot = items.SlotOf(key);
      const bool expect_live = reference_.Held(key);
      const bool is_live = slot >= 0;
      EXPECT_EQ(is_live, expect_live) << "item " << key << " at step " << reference_.item(key).t << " of stream "
                                      << reference_.item(key).stream;
      if (is_live != expect_live) return false;
      if (!is_live) {
        ++coverage_.removed_seen;
        continue;
      }
      EXPECT_GE(reference_.EarliestKey(key), oldest_step) << "item " << key;
      EXPECT_GT(Leaf(items, slot), 0.0) << "item " << key;
      EXPECT_EQ(items.KeyAt(slot), key);
      ++live;
      ++coverage_.live_checked;
      std::vector<std::byte> got(static_cast<size_t>(fixture_.steps->SampleItemBytes()));
      fixture_.steps->Assemble(std::span<const int64_t>(&slot, 1), got);
      std::vector<std::byte> want;
      for (const auto& column : reference_.Expected(key)) want.insert(want.end(), column.begin(), column.end());
      EXPECT_EQ(got, want) << "item " << key << " at step " << reference_.item(key).t;
      if (got != want) return false;
    }
    EXPECT_EQ(items.size(), live);
    EXPECT_EQ(reference_.held_items(), live);
    coverage_.pushed_out = reference_.pushed_out();
    if (live > 0 && !CheckSampledBatch()) return false;
    for (int s = 0; s < w_.options.streams; ++s) {
      EXPECT_EQ(fixture_.steps->stream_steps(s), reference_.steps(s));
      const auto& history = reference_.history(s);
      const int64_t held = std::count_if(history.begin(), history.end(),
                                         [&](const RefStep& step) { return step.key >= oldest_step; });
      EXPECT_EQ(fixture_.steps->steps().stream_oldest(s), reference_.steps(s) - held);
    }
    return !::testing::Test::HasFailure();
  }

  // Updates to random recent items (from those the table held a table's
  // worth of items ago): applied to held ones, stale for those gone (which
  // stay gone).
  void UpdateSome() {
    Replay& items = *fixture_.items;
    if (items.next_key() == 0) return;
    std::vector<uint64_t> keys;
    int64_t removed = 0;
    for (int j = 0; j < 3; ++j) {
      const int64_t from = std::max<int64_t>(0, static_cast<int64_t>(items.next_key()) - 2 * items.capacity());
      const uint64_t key = static_cast<uint64_t>(Pick(from, static_cast<int64_t>(items.next_key()) - 1));
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      keys.push_back(key);
      removed += !reference_.Held(key);
    }
    UpdateCounts counts;
    ASSERT_TRUE(items.UpdatePriorities(keys, std::vector<double>(keys.size(), 2.5), &counts).ok());
    coverage_.stale += counts.stale;
    EXPECT_EQ(counts.stale, removed);
    EXPECT_EQ(counts.applied, static_cast<int64_t>(keys.size()) - removed);
  }

 private:
  std::vector<std::vector<std::byte>> RandomStep(int stream) {
    if (episode_left_[stream] == 0) {
      const int lengths[] = {1, 1, 2, 3, 4, 6, 9, 15};
      episode_left_[stream] = lengths[Pick(0, 7)];
    }
    const bool done = --episode_left_[stream] == 0;
    std::vector<std::vector<std::byte>> step;
    for (int c = 0; c < static_cast<int>(w_.schema.columns.size()); ++c) {
      const Column& column = w_.schema.columns[c];
      std::vector<std::byte> row(static_cast<size_t>(column.ItemBytes()));
      if (column.name == "done") {
        // Terminal or truncated (this step then holds the bootstrap observation).
        row[0] = done ? static_cast<std::byte>(Pick(1, 2)) : std::byte{0};
      } else if (column.name == "reward") {
        const double reward = std::uniform_real_distribution(-3.0, 3.0)(rng_);
        const float reward32 = static_cast<float>(reward);
        std::memcpy(row.data(), column.dtype == DType::kFloat32 ? static_cast<const void*>(&reward32) : &reward,
                    row.size());
      } else {
        for (auto& b : row) b = static_cast<std::byte>(Pick(0, 255));
      }
      step.push_back(std::move(row));
    }
    return step;
  }

  std::vector<std::vector<std::byte>> RandomItemColumns() {
    std::vector<std::vector<std::byte>> columns;
    for (const Column& column : w_.options.item_columns) {
      std::vector<std::byte> row(static_cast<size_t>(column.ItemBytes()));
      for (auto& b : row) b = static_cast<std::byte>(Pick(0, 255));
      columns.push_back(std::move(row));
    }
    return columns;
  }

  // The same request with one item the reference says cannot be created:
  // refused, nothing changed.
  bool TryInvalidItem(int stream, int64_t first_step, int64_t steps, const std::vector<std::byte>& bulk,
                      int64_t have, uint64_t oldest_after) {
    const int64_t t = Pick(std::max<int64_t>(-2, have - 16), have + 2);
    const bool twice = reference_.ItemOver(stream, t);
    if (reference_.Creatable(stream, t, oldest_after) && !twice) return true;
    const Replay& items = *fixture_.items;
    const uint64_t next_item = items.next_key();
    const double total = items.tree().Total();
    const int64_t live = items.size();
    const std::vector<std::vector<std::vector<std::byte>>> one_item = {RandomItemColumns()};
    uint64_t first_key = 0;
    const Status refused = fixture_.steps->Append(stream, first_step, steps, bulk, std::vector<int64_t>{t}, {},
                                                  WireLayout(one_item, w_.options.item_columns.size()), &first_key);
    ++coverage_.refused;
    coverage_.twice += twice;
    EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument) << "item at step " << t << ": " << refused.ToString();
    if (twice && reference_.Creatable(stream, t, oldest_after)) {
      EXPECT_NE(refused.message().find("holds an item over that step already"), std::string::npos)
          << refused.ToString();
    }
    EXPECT_NE(refused.message().find("item 0 over step " + std::to_string(t)), std::string::npos)
        << refused.ToString();
    EXPECT_EQ(fixture_.steps->stream_steps(stream), first_step);
    EXPECT_EQ(fixture_.steps->next_step_key(), reference_.next_key() - static_cast<uint64_t>(steps));
    EXPECT_EQ(items.next_key(), next_item);
    EXPECT_EQ(items.tree().Total(), total);
    EXPECT_EQ(items.size(), live);
    return refused.code() == Status::Code::kInvalidArgument;
  }

  bool CheckSampledBatch() {
    SampleResult sample;
    EXPECT_TRUE(fixture_.items->Sample(8, 0.5, &sample).ok());
    std::vector<std::byte> got(sample.slots.size() * static_cast<size_t>(fixture_.steps->SampleItemBytes()));
    fixture_.steps->Assemble(sample.slots, got);
    std::vector<std::vector<std::vector<std::byte>>> expected;
    for (uint64_t key : sample.keys) expected.push_back(reference_.Expected(key));
    std::vector<std::byte> want;  // column after column, each column's rows for every item
    for (size_t c = 0; c < sample_schema_.columns.size(); ++c) {
      for (const auto& item : expected) {
        EXPECT_EQ(static_cast<int64_t>(item[c].size()), sample_schema_.columns[c].ItemBytes());
        want.insert(want.end(), item[c].begin(), item[c].end());
      }
    }
    EXPECT_EQ(got, want);
    return got == want;
  }

  Workload w_;
  StepReference reference_;
  std::mt19937_64 rng_;
  std::vector<int> episode_left_;
  StepFixture fixture_;
  Schema sample_schema_;
  Coverage coverage_;
};

TEST(StepReplayExactnessTest, EveryItemIsHeldExactlyAsTheReferenceSaysAndAssemblesAsTheReference) {
  Coverage total;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    const Workload w = RandomWorkload(rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " +
                 (w.options.kind == StepOptions::Kind::kNStep
                      ? "n-step " + std::to_string(w.options.n_step) + " discount " + std::to_string(w.options.discount)
                      : "sequence " + std::to_string(w.options.sequence_length) + "/" +
                            std::to_string(w.options.sequence_period)) +
                 " ring " + std::to_string(w.options.step_capacity) + " items " + std::to_string(w.item_capacity));
    StepExactnessRun run(w, seed * 7919);
    if (::testing::Test::HasFailure()) return;
    for (int request = 0; request < 400; ++request) {
      if (!run.Request()) return;
      if (request % 5 == 4 && !run.CheckEverything()) return;
      if (request % 17 == 16) run.UpdateSome();
    }
    total.Add(run.coverage());
  }
  std::printf("created %lld items (%lld over a truncated episode's bootstrap step); compared %lld held ones, saw %lld "
              "gone (%lld taken by the FIFO remover); refused %lld invalid (%lld over a step with an item); %lld "
              "stale\n",
              static_cast<long long>(total.items), static_cast<long long>(total.truncated),
              static_cast<long long>(total.live_checked), static_cast<long long>(total.removed_seen),
              static_cast<long long>(total.pushed_out), static_cast<long long>(total.refused),
              static_cast<long long>(total.twice), static_cast<long long>(total.stale));
  EXPECT_GT(total.items, 40000);
  EXPECT_GT(total.live_checked, 40000);
  EXPECT_GT(total.removed_seen, 40000);
  EXPECT_GT(total.refused, 4000);
  EXPECT_GT(total.twice, 500);
  EXPECT_GT(total.pushed_out, 1000);
  EXPECT_GT(total.stale, 2000);
  EXPECT_GT(total.truncated, 5000);
}

}  // namespace
}  // namespace perserve::replay::step_test
