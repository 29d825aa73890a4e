// The service over step streams (issue 27): appends of steps with items over
// them, through a LoopbackTransport into a StepReplay; samples assembled in
// the item layout; adds of the wrong kind, malformed appends and the rate
// limiter counting items.
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using proto::MessageKind;
using service_test::Frame;

// A step: a 2-byte frame stacked 2 deep, an action, a reward, a done flag.
Schema StepSchema() {
  return Schema{{{"obs", DType::kUInt8, {2}},
                 {"action", DType::kInt32, {}},
                 {"reward", DType::kFloat32, {}},
                 {"done", DType::kUInt8, {}}}};
}

class StepServiceTest : public ::testing::Test {
 protected:
  void Start(ServiceOptions options, int64_t capacity = 64, bool learner = false) {
    replay::StepOptions step_options;
    step_options.kind = replay::StepOptions::Kind::kNStep;
    step_options.n_step = 2;
    step_options.discount = 0.5;
    step_options.stacks = {{"obs", 2}};
    step_options.step_capacity = capacity;
    step_options.streams = 2;
    Schema stored;
    ASSERT_TRUE(replay::StepSchemas(step_options, StepSchema(), &sample_schema_, &stored).ok());
    ASSERT_TRUE(replay::StepReplay::Create(step_options, replay::ReplayOptions{capacity, 1.0, tree::Device::kCpu, 5},
                                           StepSchema(), &steps_)
                    .ok());
    replay_ = &steps_->mutable_items();
    transport_ = std::make_unique<LoopbackTransport>(2);
    if (learner) {
      transport_->SetRole(0, ClientRole::kActor);
      transport_->SetRole(1, ClientRole::kLearner);
    }
    options.stats_interval_seconds = 0.0;
    service_ = std::make_unique<ReplayService>(steps_.get(), transport_.get(), options);
  }

  // An append of steps first_step .. first_step + count - 1 of `actor` (obs
  // bytes {actor, index}, action index, reward index, done every 5th), with
  // items at `items` (priority 1 each).
  std::vector<std::byte> Append(int actor, uint64_t request_id, int64_t first_step, int64_t count,
                                const std::vector<int64_t>& items) {
    std::vector<uint8_t> obs, done;
    std::vector<int32_t> action;
    std::vector<float> reward;
    for (int64_t i = first_step; i < first_step + count; ++i) {
      obs.push_back(static_cast<uint8_t>(actor + 1));
      obs.push_back(static_cast<uint8_t>(i));
      action.push_back(static_cast<int32_t>(i));
      reward.push_back(static_cast<float>(i));
      done.push_back(i % 5 == 4);
    }
    const std::vector<double> priorities(items.size(), 1.0);
    proto::AppendMeta meta;
    meta.first_step = first_step;
    meta.steps = count;
    if (!items.empty()) meta.groups = {proto::ItemGroup{0, static_cast<int64_t>(items.size()), false, true}};
    const std::span<const std::byte> columns[] = {std::as_bytes(std::span(obs)), std::as_bytes(std::span(action)),
                                                  std::as_bytes(std::span(reward)), std::as_bytes(std::span(done))};
    const proto::ItemGroupSpans group{items, priorities, {}};
    std::vector<std::byte> frame;
    proto::EncodeAppend(request_id, meta, columns, std::span(&group, meta.groups.size()), &frame);
    return frame;
  }

  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }

  proto::Frame Reply(int client, MessageKind kind, uint64_t request_id) {
    return service_test::PopReply(*transport_, client, kind, request_id, kept_);
  }

  Status ErrorOf(int client, uint64_t request_id) {
    proto::ErrorReply error;
    EXPECT_TRUE(proto::DecodeMeta(Reply(client, MessageKind::kErrorReply, request_id), &error).ok());
    return Status::FromCode(error.code, error.message);
  }

  Schema sample_schema_;
  std::unique_ptr<replay::StepReplay> steps_;
  replay::Replay* replay_ = nullptr;  // steps_'s items
  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<ReplayService> service_;
  std::deque<std::vector<std::byte>> kept_;
};

TEST_F(StepServiceTest, AnAppendsItemsComeBackInTheItemLayout) {
  ServiceOptions options;
  options.min_size_to_sample = 1;
  Start(options);
  // Steps 0-3 (episode 0-4 goes on), items at 0 and 1 (each needs 2 steps after it).
  transport_->Push(0, Append(0, 1, 0, 4, {0, 1}));
  Step();
  proto::AddReply added;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 1), &added).ok());
  EXPECT_EQ(added.count, 2);
  EXPECT_EQ(replay_->size(), 2);

  transport_->Push(1, Frame(MessageKind::kSampleRequest, 2, proto::SampleRequest{64, 0.5}));
  Step();
  const proto::Frame reply = Reply(1, MessageKind::kSampleReply, 2);
  ASSERT_EQ(static_cast<int64_t>(reply.bulk.size()), 64 * (8 * 3 + sample_schema_.ItemBytes()));
  std::span<const std::byte> bulk = reply.bulk;
  std::vector<uint64_t> keys;
  std::vector<double> weights, probabilities;
  ASSERT_TRUE(proto::TakeArray(&bulk, 64, &keys).ok());
  ASSERT_TRUE(proto::TakeArray(&bulk, 64, &weights).ok());
  ASSERT_TRUE(proto::TakeArray(&bulk, 64, &probabilities).ok());
  // Layout: obs (2,2) uint8, action int32, return float64, discount float64, next_obs (2,2) uint8.
  ASSERT_EQ(sample_schema_.ToString(), "obs:uint8:2,2;action:int32:;return:float64:;discount:float64:;next_obs:uint8:2,2");
  std::vector<uint8_t> obs, next_obs;
  std::vector<int32_t> action;
  std::vector<double> returns, discounts;
  ASSERT_TRUE(proto::TakeArray(&bulk, 64 * 4, &obs).ok());
  ASSERT_TRUE(proto::TakeArray(&bulk, 64, &action).ok());
  ASSERT_TRUE(proto::TakeArray(&bulk, 64, &returns).ok());
  ASSERT_TRUE(proto::TakeArray(&bulk, 64, &discounts).ok());
  ASSERT_TRUE(proto::TakeArray(&bulk, 64 * 4, &next_obs).ok());
  for (int i = 0; i < 64; ++i) {
    const int t = action[static_cast<size_t>(i)];
    ASSERT_TRUE(t == 0 || t == 1) << t;
    EXPECT_EQ(keys[static_cast<size_t>(i)], static_cast<uint64_t>(t));
    // obs stacked on the last axis, oldest first: frame t-1 (zero at the episode's start), frame t.
    const uint8_t* o = &obs[static_cast<size_t>(i) * 4];
    const uint8_t expected_obs[4] = {static_cast<uint8_t>(t == 0 ? 0 : 1), 1, static_cast<uint8_t>(t == 0 ? 0 : 0),
                                     static_cast<uint8_t>(t)};
    EXPECT_EQ(std::memcmp(o, expected_obs, 4), 0) << "item at step " << t;
    EXPECT_EQ(returns[static_cast<size_t>(i)], t + 0.5 * (t + 1));
    EXPECT_EQ(discounts[static_cast<size_t>(i)], 0.25);
    const uint8_t* n = &next_obs[static_cast<size_t>(i) * 4];
    const uint8_t expected_next[4] = {1, 1, static_cast<uint8_t>(t + 1), static_cast<uint8_t>(t + 2)};
    EXPECT_EQ(std::memcmp(n, expected_next, 4), 0) << "item at step " << t;
  }
}

TEST_F(StepServiceTest, AddsOfTheWrongKindAndMalformedAppendsAreRefusedWithNothingStored) {
  Start(ServiceOptions{});
  // An add of transitions to a server of steps.
  const std::vector<std::byte> row(static_cast<size_t>(StepSchema().ItemBytes()));
  transport_->Push(0, service_test::AddFrame(1, proto::AppendMeta::kAtEnd, 1, row));
  // An append whose bulk is one byte short.
  std::vector<std::byte> short_append = Append(0, 2, 0, 3, {});
  {
    proto::Frame frame;
    ASSERT_TRUE(proto::DecodeFrame(short_append, &frame).ok());
    proto::AppendMeta meta;
    ASSERT_TRUE(proto::DecodeMeta(frame, &meta).ok());
    std::vector<std::byte> bulk(frame.bulk.begin(), frame.bulk.end() - 1);
    short_append = Frame(MessageKind::kAppendRequest, 2, meta, {std::span(bulk)});
  }
  transport_->Push(0, short_append);
  // An item whose n steps are not appended yet, and one at a step never appended.
  transport_->Push(0, Append(0, 3, 0, 2, {0}));
  transport_->Push(0, Append(0, 4, 0, 2, {7}));
  // An append that skips steps (its first step is not the stream's next).
  transport_->Push(0, Append(0, 5, 3, 2, {}));
  for (int i = 0; i < 3; ++i) Step();
  EXPECT_EQ(ErrorOf(0, 1).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(ErrorOf(0, 2).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ErrorOf(0, 3).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ErrorOf(0, 4).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ErrorOf(0, 5).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(steps_->stream_steps(0), 0);
  EXPECT_EQ(replay_->size(), 0);
  // The stream then goes on from step 0.
  transport_->Push(0, Append(0, 6, 0, 3, {0}));
  Step();
  proto::AddReply added;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 6), &added).ok());
  EXPECT_EQ(added.count, 1);
  EXPECT_EQ(steps_->stream_steps(0), 3);
}

// fuzz_step_service's first finding: counts whose sum overflows (UBSan),
// and counts past the ring, refused before anything can hold them.
TEST_F(StepServiceTest, AnAppendWithCountsPastTheRingIsRefusedBeforeItCanWait) {
  Start(ServiceOptions{});
  const auto append_of = [](uint64_t id, int64_t steps, int64_t items) {
    proto::AppendMeta meta;
    meta.steps = steps;
    meta.groups = {proto::ItemGroup{0, items, false, false}};
    return Frame(MessageKind::kAppendRequest, id, meta);
  };
  transport_->Push(0, append_of(1, int64_t{4107564335138603016}, int64_t{6003298303284871168}));
  transport_->Push(0, append_of(2, 65, 0));
  transport_->Push(0, append_of(3, 1, 65));
  Step();
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_EQ(ErrorOf(0, id).code(), Status::Code::kInvalidArgument) << id;
  EXPECT_EQ(steps_->stream_steps(0), 0);
}

// Issue 33, finding 3: the rate limiter never holds an append that creates
// no items (docs/steps.md: an append of steps alone is never held), even
// with the actors past its buffer: 7 items came in while the table held
// fewer than M = 4 (the limiter lets those in), 2 past R M + E = 5.
TEST_F(StepServiceTest, TheRateLimiterCountsItemsNotSteps) {
  ServiceOptions options;
  options.samples_per_insert = 1.0;
  options.error_buffer = 1.0;
  options.min_size_to_sample = 4;
  Start(options, 64, /*learner=*/true);
  transport_->Push(0, Append(0, 1, 0, 10, {0, 1, 2, 3, 5, 6, 7}));
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  // Steps alone insert nothing: never held, however many.
  uint64_t request = 2;
  int64_t step = 10;
  for (; step < 42; step += 4) transport_->Push(0, Append(0, request++, step, 4, {}));
  for (int i = 0; i < 12; ++i) Step();
  for (uint64_t r = 2; r < request; ++r) Reply(0, MessageKind::kAddReply, r);
  EXPECT_EQ(service_->held_adds(0), 0);
  EXPECT_EQ(service_->counters().deferred_adds, 0) << "an append of steps alone was held, even for a pass";
  // One item more: held.
  transport_->Push(0, Append(0, request, step, 4, {30}));
  Step();
  EXPECT_EQ(service_->held_adds(0), 1) << "an eighth item with no sample: the limiter holds the append";
  EXPECT_EQ(service_->counters().deferred_adds, 1);
  EXPECT_EQ(steps_->stream_steps(0), step);
}

}  // namespace
}  // namespace perserve::service
