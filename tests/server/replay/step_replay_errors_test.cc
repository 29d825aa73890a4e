// StepReplay's refusals: bad options at StepSchemas and Create, and every bad
// Append refused with a message naming the problem and nothing changed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"

namespace perserve::replay::step_test {
namespace {

// Steps first .. first + count - 1 of a TestStepSchema stream: obs bytes
// from the index, reward 1, done where `done_at` says.
std::vector<std::byte> MakeSteps(int64_t first, int64_t count, const std::vector<int64_t>& done_at = {}) {
  std::vector<std::vector<std::vector<std::byte>>> rows;
  for (int64_t i = first; i < first + count; ++i) {
    std::vector<std::vector<std::byte>> row;
    row.emplace_back(6, static_cast<std::byte>(i));  // obs
    const float reward = 1.0f;
    row.emplace_back(sizeof(float));
    std::memcpy(row.back().data(), &reward, sizeof(float));
    row.emplace_back(16, std::byte{0});  // pos
    const bool done = std::find(done_at.begin(), done_at.end(), i) != done_at.end();
    row.emplace_back(1, done ? std::byte{1} : std::byte{0});
    row.emplace_back(4, std::byte{0});  // action
    rows.push_back(std::move(row));
  }
  return WireLayout(rows, 5);
}

Status Schemas(const StepOptions& options, const Schema& step_schema = TestStepSchema()) {
  Schema sample, stored;
  return StepSchemas(options, step_schema, &sample, &stored);
}

void ExpectRefused(const Status& status, const std::string& fragment) {
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.ToString() << " lacks " << fragment;
}

TEST(StepSchemasTest, OptionsAreCheckedAgainstTheStepSchema) {
  StepOptions n_step;
  n_step.kind = StepOptions::Kind::kNStep;
  n_step.stacks = {{"obs", 4}};
  EXPECT_TRUE(Schemas(n_step).ok());
  StepOptions o = n_step;
  o.n_step = 0;
  ExpectRefused(Schemas(o), "n-step 0");
  for (double discount : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    o = n_step;
    o.discount = discount;
    ExpectRefused(Schemas(o), "discount");
  }
  o = n_step;
  o.stacks = {{"obs", 0}};
  ExpectRefused(Schemas(o), "stack obs:0: the depth must be >= 1");
  o.stacks = {{"frame", 4}};
  ExpectRefused(Schemas(o), "\"frame\" is not a step column");
  o.stacks = {{"reward", 2}};
  ExpectRefused(Schemas(o), "not stacked");
  o.stacks = {{"obs", 2}, {"obs", 3}};
  ExpectRefused(Schemas(o), "named twice");
  ExpectRefused(Schemas(n_step, TestStepSchema(DType::kInt32)), "must be a scalar float32 or float64");
  Schema vector_reward = TestStepSchema();
  vector_reward.columns[1].shape = {2};
  ExpectRefused(Schemas(n_step, vector_reward), "must be a scalar float32 or float64");
  Schema int_done = TestStepSchema();
  int_done.columns[3].dtype = DType::kInt32;
  ExpectRefused(Schemas(n_step, int_done), "must be a scalar uint8");
  o = n_step;
  o.reward_column = "r";
  ExpectRefused(Schemas(o), "reward column \"r\" is not a step column");
  // n-step items need an observation for next_: none stacked and none called obs.
  Schema no_obs = TestStepSchema();
  no_obs.columns[0].name = "frame";
  o = n_step;
  o.stacks.clear();
  ExpectRefused(Schemas(o, no_obs), "--stack");
  o.stacks = {{"frame", 1}};
  EXPECT_TRUE(Schemas(o, no_obs).ok());

  StepOptions sequence;
  sequence.kind = StepOptions::Kind::kSequence;
  sequence.sequence_length = 4;
  sequence.sequence_period = 2;
  EXPECT_TRUE(Schemas(sequence, no_obs).ok());  // sequences need no observation
  o = sequence;
  o.sequence_length = 0;
  ExpectRefused(Schemas(o), "sequence length 0");
  o = sequence;
  o.sequence_period = 5;
  ExpectRefused(Schemas(o), "period 5 must be in [1, sequence length 4]");
  o.sequence_period = 0;
  ExpectRefused(Schemas(o), "period 0");
  o = sequence;
  o.item_columns = {Column{"mask", DType::kFloat32, {}}};
  ExpectRefused(Schemas(o), "repeats");
  o.item_columns = {Column{"step", DType::kFloat32, {}}};
  ExpectRefused(Schemas(o), "\"step\" is the stored step key");
  o = sequence;
  o.streams = 0;
  ExpectRefused(Schemas(o), "0 streams");
  o = sequence;
  o.step_capacity = 0;
  ExpectRefused(Schemas(o), "step capacity 0");
}

// An item needs n + K (n-step) or L + K - 1 (sequence) steps in the ring at
// once: longer than the ring is refused at Create, not at the first append.
TEST(StepSchemasTest, AnItemSpanLongerThanTheRingIsRefusedAtCreate) {
  StepOptions sequence;
  sequence.kind = StepOptions::Kind::kSequence;
  sequence.sequence_length = 6;
  sequence.sequence_period = 3;
  sequence.stacks = {{"obs", 3}};
  sequence.step_capacity = 8;  // 6 + 3 - 1 = 8 fits
  StepFixture fixture;
  EXPECT_TRUE(MakeStepReplay(sequence, TestStepSchema(), 16, &fixture).ok());
  sequence.step_capacity = 7;
  ExpectRefused(MakeStepReplay(sequence, TestStepSchema(), 16, &fixture),
                "an item spans 8 steps (sequence length 6 and a stack of 3), more than the step ring holds (7 steps)");
  StepOptions n_step;
  n_step.kind = StepOptions::Kind::kNStep;
  n_step.n_step = 3;
  n_step.stacks = {{"obs", 4}};
  n_step.step_capacity = 6;
  ExpectRefused(MakeStepReplay(n_step, TestStepSchema(), 16, &fixture), "an item spans 7 steps");
  n_step.step_capacity = 7;
  EXPECT_TRUE(MakeStepReplay(n_step, TestStepSchema(), 16, &fixture).ok());
}

// The table's items live in a Replay of its own, created with it (the one
// item model: no Replay is handed in): of the stored schema (the step key,
// then the item columns) and the item options given; Replay::Create's
// refusals are Create's.
TEST(StepSchemasTest, CreateMakesTheItemsReplayOfTheStoredSchema) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.stacks = {{"obs", 2}};
  options.item_columns = {Column{"state", DType::kFloat32, {3}}};
  Schema sample, stored;
  ASSERT_TRUE(StepSchemas(options, TestStepSchema(), &sample, &stored).ok());
  EXPECT_EQ(stored.ToString(), (Schema{{{"step", DType::kInt64, {}}, {"state", DType::kFloat32, {3}}}}).ToString());
  std::unique_ptr<StepReplay> steps;
  ASSERT_TRUE(StepReplay::Create(options, ReplayOptions{8, 0.5, tree::Device::kCpu, 1}, TestStepSchema(), &steps).ok());
  EXPECT_EQ(steps->items().store().schema().ToString(), stored.ToString());
  EXPECT_EQ(steps->items().capacity(), 8);
  EXPECT_EQ(steps->items().alpha(), 0.5);
  EXPECT_EQ(steps->items().size(), 0);
  ExpectRefused(StepReplay::Create(options, ReplayOptions{0, 0.5, tree::Device::kCpu, 1}, TestStepSchema(), &steps),
                "capacity 0");
  ExpectRefused(StepReplay::Create(options, ReplayOptions{8, -1.0, tree::Device::kCpu, 1}, TestStepSchema(), &steps),
                "alpha -1");
}

// What a refused Append must leave as it was.
struct Snapshot {
  uint64_t next_step_key;
  std::vector<int64_t> stream_steps;
  uint64_t next_item;
  double total;
  int64_t live;
  std::vector<int64_t> slots;      // every held item's, by key
  std::vector<std::byte> samples;  // every held slot assembled

  static Snapshot Of(const StepFixture& f, int streams) {
    Snapshot s{f.steps->next_step_key(), {}, f.items->next_key(), f.items->tree().Total(), f.items->size(), {}, {}};
    for (int i = 0; i < streams; ++i) s.stream_steps.push_back(f.steps->stream_steps(i));
    std::vector<int64_t>& slots = s.slots;
    for (uint64_t key = 0; key < f.items->next_key(); ++key) {
      const int64_t slot = f.items->SlotOf(key);
      if (slot >= 0) slots.push_back(slot);
    }
    s.samples.resize(slots.size() * static_cast<size_t>(f.steps->SampleItemBytes()));
    f.steps->Assemble(slots, s.samples);
    return s;
  }
  bool operator==(const Snapshot&) const = default;
};

class StepAppendErrorsTest : public ::testing::Test {
 protected:
  // n-step 2 over obs:3, a ring of 12 steps, 2 streams, a float32[2] item column.
  void SetUp() override {
    options_.kind = StepOptions::Kind::kNStep;
    options_.n_step = 2;
    options_.stacks = {{"obs", 3}};
    options_.step_capacity = 12;
    options_.streams = 2;
    options_.item_columns = {Column{"state", DType::kFloat32, {2}}};
    ASSERT_TRUE(MakeStepReplay(options_, TestStepSchema(), 4, &f_).ok());
    // Stream 0: steps 0..9 (an episode ends at 5), items at 1 and 6; stream 1: steps 0..1.
    uint64_t first = 0;
    ASSERT_TRUE(Append(0, 0, 10, MakeSteps(0, 10, {5}), {1, 6}, {}, &first).ok());
    ASSERT_TRUE(Append(1, 0, 2, MakeSteps(0, 2), {}, {}, &first).ok());
    before_ = Snapshot::Of(f_, 2);
    ASSERT_EQ(before_.live, 2);
  }

  Status Append(int stream, int64_t first_step, int64_t steps, const std::vector<std::byte>& columns,
                const std::vector<int64_t>& items, const std::vector<double>& priorities, uint64_t* first,
                int64_t item_bytes = -1) {
    const size_t bytes = item_bytes >= 0 ? static_cast<size_t>(item_bytes) : items.size() * 8;
    return f_.steps->Append(stream, first_step, steps, columns, items, priorities, std::vector<std::byte>(bytes),
                            first);
  }

  // A refused append: the message names the problem; nothing changed.
  void ExpectUnchanged(const Status& status, const std::string& fragment,
                       Status::Code code = Status::Code::kInvalidArgument) {
    EXPECT_EQ(status.code(), code) << status.ToString();
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.ToString() << " lacks " << fragment;
    EXPECT_TRUE(Snapshot::Of(f_, 2) == before_) << "after " << status.ToString();
  }

  StepOptions options_;
  StepFixture f_;
  Snapshot before_;
};

TEST_F(StepAppendErrorsTest, BadRequestsChangeNothing) {
  uint64_t first = 0;
  ExpectUnchanged(Append(2, 0, 1, MakeSteps(0, 1), {}, {}, &first), "stream 2 is outside [0, 2)");
  ExpectUnchanged(Append(-1, 0, 1, MakeSteps(0, 1), {}, {}, &first), "stream -1");
  ExpectUnchanged(Append(0, 9, 1, MakeSteps(9, 1), {}, {}, &first), "a request was lost or repeated",
                  Status::Code::kFailedPrecondition);
  ExpectUnchanged(Append(1, 3, 1, MakeSteps(3, 1), {}, {}, &first), "sends steps from index 3, but its next step is 2",
                  Status::Code::kFailedPrecondition);
  ExpectUnchanged(Append(0, 10, -1, {}, {}, {}, &first), "an append of -1 steps");
  ExpectUnchanged(Append(0, 10, 13, MakeSteps(10, 13), {}, {}, &first), "step capacity 12");
  std::vector<std::byte> short_steps = MakeSteps(10, 2);
  short_steps.pop_back();
  ExpectUnchanged(Append(0, 10, 2, short_steps, {}, {}, &first), "must carry");
  ExpectUnchanged(Append(0, 10, 0, MakeSteps(10, 1), {}, {}, &first), "an append of no steps and no items");
  ExpectUnchanged(Append(0, 10, 0, MakeSteps(10, 1), {8}, {}, &first), "no steps but");
  ExpectUnchanged(Append(0, 10, 2, MakeSteps(10, 2), {8}, {1.0, 2.0}, &first), "2 priorities for 1 items");
  ExpectUnchanged(Append(0, 10, 2, MakeSteps(10, 2), {8}, {std::nan("")}, &first), "position 0");
  ExpectUnchanged(Append(0, 10, 2, MakeSteps(10, 2), {8}, {-1.0}, &first), "position 0");
  ExpectUnchanged(Append(0, 10, 2, MakeSteps(10, 2), {}, {1.0}, &first), "no items but 1 priorities");
  ExpectUnchanged(Append(0, 10, 2, MakeSteps(10, 2), {7, 7, 8, 8, 9}, {}, &first), "capacity 4");
  ExpectUnchanged(Append(0, 10, 2, MakeSteps(10, 2), {8}, {}, &first, 12), "must carry 8 bytes of item columns");
  std::vector<std::byte> bad_done = MakeSteps(10, 2);
  bad_done[2 * (6 + 4 + 16) + 1] = std::byte{3};  // the done column's second step
  ExpectUnchanged(Append(0, 10, 2, bad_done, {}, {}, &first), "step 1 of the batch has done 3");
}

TEST_F(StepAppendErrorsTest, ItemsOverStepsNotHeldOrNotYetAppendedChangeNothing) {
  uint64_t first = 0;
  // Stream 0 holds steps 0..9 (keys 0..9) and gets 10, 11 (keys 12, 13):
  // then the ring's 12 steps are stream 0's 2..11 and stream 1's 0..1.
  const std::vector<std::byte> two = MakeSteps(10, 2);
  ExpectUnchanged(Append(0, 10, 2, two, {-1}, {}, &first), "item 0 over step -1 of stream 0: the stream never had it");
  ExpectUnchanged(Append(0, 10, 2, two, {8, 12}, {}, &first), "item 1 over step 12 of stream 0: not appended yet");
  // Its n-step successor (11 + 2 = 13) is not in, and its episode does not end before.
  ExpectUnchanged(Append(0, 10, 2, two, {11}, {}, &first), "needs step 13 (its n-step successor), not appended yet");
  // Step 1's stack starts at step 0, which this request overwrites.
  ExpectUnchanged(Append(0, 10, 2, two, {1}, {}, &first), "needs step 0");
  // Step 3's stack (frames 1..3) starts at step 1, which this request overwrites.
  ExpectUnchanged(Append(0, 10, 2, two, {3}, {}, &first), "needs step 1 (the first of its stack of 3");
  // Step 7's stack stops at its episode's first step, 6: fine.
  ASSERT_TRUE(Append(0, 10, 2, two, {4, 7}, {}, &first).ok());
  // Now steps 0, 1 of stream 0 are gone from the ring.
  EXPECT_EQ(f_.steps->steps().stream_oldest(0), 2);
  before_ = Snapshot::Of(f_, 2);
  ExpectUnchanged(Append(0, 12, 0, {}, {0}, {}, &first), "the ring no longer holds it (the stream holds steps 2 .. 11)");
  ExpectUnchanged(Append(1, 2, 0, {}, {0}, {}, &first), "item 0 over step 0 of stream 1: it needs step 2");
}

// Issue 33, finding 7: the same item created twice (in one request, or over
// a step the table holds an item over already) is refused, naming the step,
// and nothing of the request is stored; once the table no longer holds the
// item (its FIFO remover took it) the step may have one again.
TEST_F(StepAppendErrorsTest, AnItemCreatedTwiceIsRefusedAndNothingStored) {
  uint64_t first = 0;
  const std::vector<std::byte> two = MakeSteps(10, 2);
  ExpectUnchanged(Append(0, 10, 2, two, {7, 8, 7}, {}, &first),
                  "the request creates two items over step 7 of stream 0; an item is created once");
  ExpectUnchanged(Append(0, 10, 0, {}, {6}, {}, &first),
                  "item 0 over step 6 of stream 0: the table holds an item over that step already (key 1); an item "
                  "is created once");
  ExpectUnchanged(Append(0, 10, 0, {}, {4, 1}, {}, &first), "item 1 over step 1 of stream 0: the table holds an item");
  // Three more items fill the table (capacity 4): the oldest, key 0 over step 1, leaves.
  ASSERT_TRUE(Append(0, 10, 0, {}, {2, 3, 4}, {}, &first).ok());
  EXPECT_EQ(f_.items->SlotOf(0), -1);
  ASSERT_TRUE(Append(0, 10, 0, {}, {1}, {}, &first).ok());
  EXPECT_EQ(first, 5u);
  EXPECT_EQ(f_.items->SlotOf(1), -1);  // key 1, over step 6, pushed out in turn
  ASSERT_TRUE(Append(0, 10, 0, {}, {6}, {}, &first).ok());
  EXPECT_EQ(first, 6u);
  before_ = Snapshot::Of(f_, 2);
  ExpectUnchanged(Append(0, 10, 0, {}, {3}, {}, &first), "(key 3)");  // keys 3 .. 6 held
}

// Issue 33: an item over a step of a stream whose steps have all left the
// ring says so, not "the stream holds steps 3 .. 2".
TEST(StepAppendMessagesTest, AStreamHoldingNoStepIsDescribedAsHoldingNone) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 1;
  options.stacks = {{"obs", 1}};
  options.step_capacity = 4;
  options.streams = 2;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, TestStepSchema(), 8, &f).ok());
  uint64_t first = 0;
  ASSERT_TRUE(f.steps->Append(0, 0, 3, MakeSteps(0, 3), {}, {}, {}, &first).ok());
  ASSERT_TRUE(f.steps->Append(1, 0, 4, MakeSteps(0, 4), {}, {}, {}, &first).ok());
  ASSERT_EQ(f.steps->steps().stream_oldest(0), 3);  // none of stream 0's steps held
  const Status none = f.steps->Append(0, 3, 0, {}, std::vector<int64_t>{1}, {}, {}, &first);
  ExpectRefused(none, "item 0 over step 1 of stream 0: the ring no longer holds it (it holds none of the stream's 3 "
                      "steps)");
  EXPECT_EQ(none.message().find("3 .. 2"), std::string::npos) << none.ToString();
  // A stream holding some says which.
  ASSERT_TRUE(f.steps->Append(0, 3, 2, MakeSteps(3, 2), {}, {}, {}, &first).ok());
  ExpectRefused(f.steps->Append(0, 5, 0, {}, std::vector<int64_t>{1}, {}, {}, &first),
                "the ring no longer holds it (the stream holds steps 3 .. 4)");
  EXPECT_EQ(f.items->next_key(), 0u);
}

TEST(StepAppendSequenceErrorsTest, ASequenceMustStartAMultipleOfThePeriodIntoItsEpisode) {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 4;
  options.sequence_period = 2;
  options.step_capacity = 32;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, TestStepSchema(), 8, &f).ok());
  uint64_t first = 0;
  // An episode of 3 steps (0..2), then one from step 3.
  ASSERT_TRUE(f.steps->Append(0, 0, 10, MakeSteps(0, 10, {2}), std::vector<int64_t>{0, 2, 3, 5}, {}, {}, &first).ok());
  const Status misaligned = f.steps->Append(0, 10, 0, {}, std::vector<int64_t>{4}, {}, {}, &first);
  ExpectRefused(misaligned, "starts 1 steps into the episode that began at step 3");
  const Status open_end = f.steps->Append(0, 10, 0, {}, std::vector<int64_t>{7}, {}, {}, &first);
  ExpectRefused(open_end, "needs step 10 (its sequence's last)");
  EXPECT_EQ(f.items->next_key(), 4u);
}

}  // namespace
}  // namespace perserve::replay::step_test
