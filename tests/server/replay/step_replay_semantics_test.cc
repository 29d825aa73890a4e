// StepReplay's semantics on small hand-computed cases (the exactness test
// checks the same rules at random): sample layouts, n-step returns and
// discounts at an episode's end, stacks zeroed before its start, sequence
// masks, and exact eviction.
#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"

namespace perserve::replay::step_test {
namespace {

std::string Names(const Schema& schema) {
  std::string names;
  for (const Column& column : schema.columns) names += column.ToString() + " ";
  return names;
}

// Frames on a new last axis (Dopamine's (84, 84, 4)) or, frames first,
// a new first axis (PyTorch's (4, 84, 84)).
TEST(StepLayoutTest, AtariNStepStacksFramesOnANewLastOrFirstAxis) {
  const Schema atari{{{"obs", DType::kUInt8, {84, 84}},
                      {"action", DType::kInt32, {}},
                      {"reward", DType::kFloat32, {}},
                      {"done", DType::kUInt8, {}}}};
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 3;
  options.stacks = {{"obs", 4}};
  Schema sample, stored;
  ASSERT_TRUE(StepSchemas(options, atari, &sample, &stored).ok());
  EXPECT_EQ(Names(sample), "obs:uint8:84,84,4 action:int32: return:float64: discount:float64: next_obs:uint8:84,84,4 ");
  EXPECT_EQ(Names(stored), "step:int64: ");
  options.frames_first = true;
  ASSERT_TRUE(StepSchemas(options, atari, &sample, &stored).ok());
  EXPECT_EQ(Names(sample), "obs:uint8:4,84,84 action:int32: return:float64: discount:float64: next_obs:uint8:4,84,84 ");
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 80;
  options.sequence_period = 40;
  ASSERT_TRUE(StepSchemas(options, atari, &sample, &stored).ok());
  EXPECT_EQ(sample.columns[0].ToString(), "obs:uint8:80,4,84,84") << "a sequence's steps, then each step's stack";
}

TEST(StepLayoutTest, CartPoleGetsNextObsWithoutStacks) {
  const Schema cartpole{{{"obs", DType::kFloat32, {4}},
                         {"action", DType::kInt64, {}},
                         {"reward", DType::kFloat32, {}},
                         {"done", DType::kUInt8, {}}}};
  Schema sample, stored;
  StepOptions n_step;
  n_step.kind = StepOptions::Kind::kNStep;
  ASSERT_TRUE(StepSchemas(n_step, cartpole, &sample, &stored).ok());
  EXPECT_EQ(Names(sample), "obs:float32:4 action:int64: return:float64: discount:float64: next_obs:float32:4 ");
}

TEST(StepLayoutTest, SequencesReturnEveryColumnPerStepAMaskAndTheItemColumns) {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 5;
  options.sequence_period = 2;
  options.stacks = {{"obs", 2}};
  options.item_columns = {Column{"state", DType::kFloat32, {8}}};
  Schema sample, stored;
  ASSERT_TRUE(StepSchemas(options, TestStepSchema(), &sample, &stored).ok());
  EXPECT_EQ(Names(sample),
            "obs:uint8:5,2,3,2 reward:float32:5 pos:float64:5,2 done:uint8:5 action:int32:5 mask:uint8:5 "
            "state:float32:8 ");
  EXPECT_EQ(Names(stored), "step:int64: state:float32:8 ");
}

// A tiny Atari: obs uint8[2], stacked 3; step i's frame is {10i+1, 10i+2}
// and its reward i+1.
const Schema kTiny{{{"obs", DType::kUInt8, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};

std::vector<std::byte> TinySteps(int64_t first, int64_t count, int64_t done_at, uint8_t done = 1) {
  std::vector<std::vector<std::vector<std::byte>>> rows;
  for (int64_t i = first; i < first + count; ++i) {
    const float reward = static_cast<float>(i + 1);
    std::vector<std::byte> reward_bytes(4);
    std::memcpy(reward_bytes.data(), &reward, 4);
    rows.push_back({{static_cast<std::byte>(10 * i + 1), static_cast<std::byte>(10 * i + 2)},
                    reward_bytes,
                    {i == done_at ? std::byte{done} : std::byte{0}}});
  }
  return WireLayout(rows, 3);
}

// obs (2,3), return, discount, next_obs (2,3), as one item's sample.
struct TinyNStep {
  uint8_t obs[6];
  double ret;
  double discount;
  uint8_t next_obs[6];
};

TinyNStep AssembleTiny(const StepFixture& f, uint64_t key) {
  const int64_t slot = f.items->SlotOf(key);
  EXPECT_GE(slot, 0) << "item " << key << " is not held";
  std::vector<std::byte> bytes(static_cast<size_t>(f.steps->SampleItemBytes()));
  EXPECT_EQ(bytes.size(), 6u + 8 + 8 + 6);
  f.steps->Assemble(std::span<const int64_t>(&slot, 1), bytes);
  TinyNStep item;
  std::memcpy(item.obs, bytes.data(), 6);
  std::memcpy(&item.ret, bytes.data() + 6, 8);
  std::memcpy(&item.discount, bytes.data() + 14, 8);
  std::memcpy(item.next_obs, bytes.data() + 22, 6);
  return item;
}

// The stacked value of frames a, b, c (-1: a zero frame): element-major,
// frames oldest first.
std::vector<uint8_t> Stack(int a, int b, int c) {
  const auto frame = [](int i, int e) { return i < 0 ? 0 : 10 * i + 1 + e; };
  return {static_cast<uint8_t>(frame(a, 0)), static_cast<uint8_t>(frame(b, 0)), static_cast<uint8_t>(frame(c, 0)),
          static_cast<uint8_t>(frame(a, 1)), static_cast<uint8_t>(frame(b, 1)), static_cast<uint8_t>(frame(c, 1))};
}
std::vector<uint8_t> Bytes(const uint8_t (&values)[6]) { return {values, values + 6}; }

TEST(StepNStepTest, ReturnsDiscountsAndStacksStopAtTheEpisodesEnd) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 3;
  options.discount = 0.5;
  options.stacks = {{"obs", 3}};
  options.step_capacity = 16;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, kTiny, 8, &f).ok());
  uint64_t first = 0;
  // Steps 0..7, the first episode ending at step 3.
  ASSERT_TRUE(f.steps->Append(0, 0, 8, TinySteps(0, 8, 3), std::vector<int64_t>{0, 1, 3, 4}, {}, {}, &first).ok());

  TinyNStep item = AssembleTiny(f, 0);  // steps 0..2, then step 3's frames
  EXPECT_EQ(Bytes(item.obs), Stack(-1, -1, 0));
  EXPECT_EQ(item.ret, 1 + 0.5 * 2 + 0.25 * 3);
  EXPECT_EQ(item.discount, 0.125);
  EXPECT_EQ(Bytes(item.next_obs), Stack(1, 2, 3));

  item = AssembleTiny(f, 1);  // steps 1..3: the episode ends within
  EXPECT_EQ(Bytes(item.obs), Stack(-1, 0, 1));
  EXPECT_EQ(item.ret, 2 + 0.5 * 3 + 0.25 * 4);
  EXPECT_EQ(item.discount, 0.0);
  EXPECT_EQ(Bytes(item.next_obs), Stack(-1, -1, -1));

  item = AssembleTiny(f, 2);  // the terminal step: n' = 1
  EXPECT_EQ(Bytes(item.obs), Stack(1, 2, 3));
  EXPECT_EQ(item.ret, 4.0);
  EXPECT_EQ(item.discount, 0.0);

  item = AssembleTiny(f, 3);  // a new episode: no frames from the last one
  EXPECT_EQ(Bytes(item.obs), Stack(-1, -1, 4));
  EXPECT_EQ(item.ret, 5 + 0.5 * 6 + 0.25 * 7);
  EXPECT_EQ(item.discount, 0.125);
  EXPECT_EQ(Bytes(item.next_obs), Stack(5, 6, 7));
}

// Every byte of PlanReply's parts, in order (what a transport sends).
std::vector<std::byte> Gathered(const ReplyPlan& plan) {
  std::vector<std::byte> bytes;
  for (const ReplyPlan::Part& part : plan.parts) {
    const std::byte* from = part.row != nullptr ? part.row : plan.scratch.data() + part.offset;
    bytes.insert(bytes.end(), from, from + part.bytes);
  }
  return bytes;
}

TEST(StepNStepTest, FramesFirstStacksTheSameFramesAndAReplyNamesThemInTheRing) {
  for (const bool frames_first : {false, true}) {
    SCOPED_TRACE(frames_first ? "frames first" : "frames last");
    StepOptions options;
    options.kind = StepOptions::Kind::kNStep;
    options.n_step = 3;
    options.discount = 0.5;
    options.stacks = {{"obs", 3}};
    options.frames_first = frames_first;
    options.step_capacity = 16;
    StepFixture f;
    ASSERT_TRUE(MakeStepReplay(options, kTiny, 8, &f).ok());
    uint64_t first = 0;
    ASSERT_TRUE(f.steps->Append(0, 0, 8, TinySteps(0, 8, 3), std::vector<int64_t>{0, 1, 3, 4}, {}, {}, &first).ok());
    // Frame i is {10i+1, 10i+2}; frames first, a stack is its frames in order (-1: zeros).
    const auto stack = [&](int a, int b, int c) {
      if (!frames_first) return Stack(a, b, c);
      std::vector<uint8_t> out;
      for (const int i : {a, b, c}) {
        out.push_back(static_cast<uint8_t>(i < 0 ? 0 : 10 * i + 1));
        out.push_back(static_cast<uint8_t>(i < 0 ? 0 : 10 * i + 2));
      }
      return out;
    };
    EXPECT_EQ(Bytes(AssembleTiny(f, 0).obs), stack(-1, -1, 0));
    EXPECT_EQ(Bytes(AssembleTiny(f, 0).next_obs), stack(1, 2, 3));
    EXPECT_EQ(Bytes(AssembleTiny(f, 1).next_obs), stack(-1, -1, -1)) << "the episode ends within: zeros";
    EXPECT_EQ(Bytes(AssembleTiny(f, 3).obs), stack(-1, -1, 4));

    // A batch's plan gives Assemble's bytes; frames first, every frame is a part in the ring.
    const std::vector<int64_t> slots{f.items->SlotOf(0), f.items->SlotOf(3), f.items->SlotOf(1), f.items->SlotOf(0)};
    std::vector<std::byte> assembled(slots.size() * static_cast<size_t>(f.steps->SampleItemBytes()));
    f.steps->Assemble(slots, assembled);
    ReplyPlan plan;
    f.steps->table(0).PlanReply(slots, &plan);
    EXPECT_EQ(Gathered(plan), assembled);
    EXPECT_EQ(f.steps->table(0).RepliesFromRing(), frames_first);
    const auto ring_parts = std::count_if(plan.parts.begin(), plan.parts.end(),
                                          [](const ReplyPlan::Part& part) { return part.step_slot >= 0; });
    // obs: 1 + 1 + 2 + 1 frames held; next_obs: 3 + 3 + 0 + 3 (item 1's are zeros).
    EXPECT_EQ(ring_parts, frames_first ? 5 + 9 : 0);
  }
}

TEST(StepNStepTest, ATruncatedEpisodeBootstrapsFromItsLastObservation) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 3;
  options.discount = 0.5;
  options.stacks = {{"obs", 3}};
  options.step_capacity = 16;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, kTiny, 8, &f).ok());
  uint64_t first = 0;
  // Steps 0..7; the first episode is cut off after step 2's action: step 3
  // (done 2) holds the observation it was cut off at.
  const std::vector<std::byte> steps = TinySteps(0, 8, 3, 2);
  const Status at_bootstrap = f.steps->Append(0, 0, 8, steps, std::vector<int64_t>{0, 3}, {}, {}, &first);
  EXPECT_EQ(at_bootstrap.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(at_bootstrap.message().find("item 1 over step 3 of stream 0: it is a truncated episode's bootstrap"),
            std::string::npos)
      << at_bootstrap.ToString();
  ASSERT_TRUE(f.steps->Append(0, 0, 8, steps, std::vector<int64_t>{0, 1, 2, 4}, {}, {}, &first).ok());

  TinyNStep item = AssembleTiny(f, 0);  // steps 0..2, then step 3's frames: as if the episode went on
  EXPECT_EQ(item.ret, 1 + 0.5 * 2 + 0.25 * 3);
  EXPECT_EQ(item.discount, 0.125);
  EXPECT_EQ(Bytes(item.next_obs), Stack(1, 2, 3));

  item = AssembleTiny(f, 1);  // n' = 2: step 3's reward is not summed, and the target bootstraps from it
  EXPECT_EQ(Bytes(item.obs), Stack(-1, 0, 1));
  EXPECT_EQ(item.ret, 2 + 0.5 * 3);
  EXPECT_EQ(item.discount, 0.25);
  EXPECT_EQ(Bytes(item.next_obs), Stack(1, 2, 3));

  item = AssembleTiny(f, 2);  // n' = 1
  EXPECT_EQ(item.ret, 3.0);
  EXPECT_EQ(item.discount, 0.5);
  EXPECT_EQ(Bytes(item.next_obs), Stack(1, 2, 3));

  item = AssembleTiny(f, 3);  // the next episode starts after the bootstrap step
  EXPECT_EQ(Bytes(item.obs), Stack(-1, -1, 4));
  EXPECT_EQ(item.discount, 0.125);
}

TEST(StepNStepTest, AnItemIsWholeOnceItsTruncatedEpisodesBootstrapStepIsIn) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 3;
  options.stacks = {{"obs", 3}};
  options.step_capacity = 16;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, kTiny, 8, &f).ok());
  uint64_t first = 0;
  ASSERT_TRUE(f.steps->Append(0, 0, 2, TinySteps(0, 2, -1), {}, {}, {}, &first).ok());
  EXPECT_EQ(f.steps->Append(0, 2, 0, {}, std::vector<int64_t>{1}, {}, {}, &first).code(),
            Status::Code::kInvalidArgument);  // step 4 is not in, nor the episode's end
  ASSERT_TRUE(f.steps->Append(0, 2, 1, TinySteps(2, 1, 2, 2), std::vector<int64_t>{1}, {}, {}, &first).ok());
  const TinyNStep item = AssembleTiny(f, first);
  EXPECT_EQ(item.ret, 2.0);
  EXPECT_EQ(item.discount, options.discount);
  EXPECT_EQ(Bytes(item.next_obs), Stack(0, 1, 2));
}

TEST(StepSequenceTest, ATruncatedEpisodesBootstrapStepIsInItsSequencesWithMaskOne) {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 4;
  options.sequence_period = 2;
  options.step_capacity = 16;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, kTiny, 8, &f).ok());
  uint64_t first = 0;
  // Steps 0..2, the episode cut off with step 2 its bootstrap step.
  ASSERT_TRUE(f.steps->Append(0, 0, 3, TinySteps(0, 3, 2, 2), std::vector<int64_t>{0}, {}, {}, &first).ok());
  EXPECT_EQ(f.steps->Append(0, 3, 0, {}, std::vector<int64_t>{2}, {}, {}, &first).code(),
            Status::Code::kInvalidArgument);  // a sequence cannot start at it either
  std::vector<std::byte> out(32);
  const int64_t slot = f.items->SlotOf(0);
  ASSERT_EQ(slot, 0);
  f.steps->Assemble(std::span<const int64_t>(&slot, 1), out);
  EXPECT_EQ(static_cast<int>(out[8 + 16 + 2]), 2);  // done, step 2
  EXPECT_EQ(static_cast<int>(out[8 + 16 + 4 + 2]), 1);  // mask, step 2
  EXPECT_EQ(static_cast<int>(out[8 + 16 + 4 + 3]), 0);
}

TEST(StepSequenceTest, StepsPastTheEpisodesEndAreZeroAndMasked) {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 4;
  options.sequence_period = 2;
  options.step_capacity = 16;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, kTiny, 8, &f).ok());
  uint64_t first = 0;
  // Steps 0..6, the first episode ending at step 2; sequences at 0, 2 and 3.
  ASSERT_TRUE(f.steps->Append(0, 0, 7, TinySteps(0, 7, 2), std::vector<int64_t>{0, 2, 3}, {}, {}, &first).ok());
  // obs [4,2], reward [4], done [4], mask [4]: 8 + 16 + 4 + 4 bytes.
  ASSERT_EQ(f.steps->SampleItemBytes(), 32);
  const std::vector<int64_t> slots = {f.items->SlotOf(0), f.items->SlotOf(1), f.items->SlotOf(2)};
  std::vector<std::byte> out(3 * 32);
  f.steps->Assemble(slots, out);
  const auto u8 = [&out](size_t offset, size_t count) {
    std::vector<int> values;
    for (size_t j = 0; j < count; ++j) values.push_back(static_cast<int>(out[offset + j]));
    return values;
  };
  const auto f32 = [&out](size_t offset) {
    std::vector<float> values(4);
    std::memcpy(values.data(), out.data() + offset, 16);
    return values;
  };
  // Column after column, each column's 3 items in order.
  EXPECT_EQ(u8(0, 8), (std::vector<int>{1, 2, 11, 12, 21, 22, 0, 0}));    // item at 0: steps 0..2, then zeros
  EXPECT_EQ(u8(8, 8), (std::vector<int>{21, 22, 0, 0, 0, 0, 0, 0}));      // at 2: the terminal step alone
  EXPECT_EQ(u8(16, 8), (std::vector<int>{31, 32, 41, 42, 51, 52, 61, 62}));  // at 3: a new episode, whole
  EXPECT_EQ(f32(24), (std::vector<float>{1, 2, 3, 0}));
  EXPECT_EQ(f32(40), (std::vector<float>{3, 0, 0, 0}));
  EXPECT_EQ(u8(72, 4), (std::vector<int>{0, 0, 1, 0}));  // done
  EXPECT_EQ(u8(84, 4), (std::vector<int>{1, 1, 1, 0}));  // mask
  EXPECT_EQ(u8(88, 4), (std::vector<int>{1, 0, 0, 0}));
  EXPECT_EQ(u8(92, 4), (std::vector<int>{1, 1, 1, 1}));
}

TEST(StepEvictionTest, OverwritingAStepRemovesExactlyTheItemsThatNeedIt) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 1;
  options.stacks = {{"obs", 2}};
  options.step_capacity = 6;
  StepFixture f;
  ASSERT_TRUE(MakeStepReplay(options, kTiny, 16, &f).ok());
  uint64_t first = 0;
  // Items at steps 0..4 (item t needs t-1 .. t+1); item 1's stack starts at step 0.
  ASSERT_TRUE(f.steps->Append(0, 0, 6, TinySteps(0, 6, -1), std::vector<int64_t>{0, 1, 2, 3, 4}, {}, {}, &first).ok());
  EXPECT_EQ(f.items->size(), 5);
  ASSERT_TRUE(f.steps->Append(0, 6, 1, TinySteps(6, 1, -1), {}, {}, {}, &first).ok());  // overwrites step 0
  // Items 0 and 1 are gone: not held, their slots free, their leaves 0.
  EXPECT_EQ(f.items->size(), 3);
  EXPECT_EQ(f.items->SlotOf(0), -1);
  EXPECT_EQ(f.items->SlotOf(1), -1);
  EXPECT_EQ(Leaf(*f.items, 0), 0.0);
  EXPECT_EQ(Leaf(*f.items, 1), 0.0);
  EXPECT_EQ(Leaf(*f.items, 2), 1.0);
  // An update to an evicted item is stale: it must not come back.
  UpdateCounts counts;
  ASSERT_TRUE(f.items->UpdatePriorities(std::vector<uint64_t>{0, 1, 2}, std::vector<double>{5, 5, 5}, &counts).ok());
  EXPECT_EQ(counts.stale, 2);
  EXPECT_EQ(counts.applied, 1);
  EXPECT_EQ(Leaf(*f.items, 1), 0.0);
  ASSERT_TRUE(f.steps->Append(0, 7, 1, TinySteps(7, 1, -1), std::vector<int64_t>{6}, {}, {}, &first).ok());
  EXPECT_EQ(f.items->size(), 3);  // item 2 gone with step 1; the item at 6 in, in its slot
  EXPECT_EQ(f.items->SlotOf(2), -1);
  EXPECT_EQ(f.items->SlotOf(5), 2);
  std::set<uint64_t> drawn;
  SampleResult sample;
  for (int round = 0; round < 50; ++round) {
    ASSERT_TRUE(f.items->Sample(16, 1.0, &sample).ok());
    drawn.insert(sample.keys.begin(), sample.keys.end());
  }
  EXPECT_EQ(drawn, (std::set<uint64_t>{3, 4, 5}));
}

}  // namespace
}  // namespace perserve::replay::step_test
