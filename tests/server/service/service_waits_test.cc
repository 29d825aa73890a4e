// Nothing waits silently or for ever (issue 12), over the loopback transport:
// timeouts on samples and held adds, samples that can never be served once
// no actor remains, the rate limiter holding each side back (and never both),
// a close behind held adds, and the stats line saying what waits.
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <thread>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "server/service/service_test_util.h"
#include "server/service/loopback_transport.h"
#include "service/rate_limiter.h"
#include "service/replay_service.h"

namespace perserve::service {
namespace {

using proto::MessageKind;
using service_test::Frame;

// An add of `count` transitions at the end of the sender's stream.
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t count, double timeout_seconds = 0.0) {
  const std::vector<int64_t> ids(static_cast<size_t>(count), 7);
  return service_test::AddFrame(request_id, proto::AppendMeta::kAtEnd, count, std::as_bytes(std::span(ids)), {},
                                timeout_seconds);
}

std::vector<std::byte> SampleFrame(uint64_t request_id, int64_t batch_size, double timeout_seconds = 0.0) {
  return Frame(MessageKind::kSampleRequest, request_id, proto::SampleRequest{batch_size, 0.5, timeout_seconds});
}

std::vector<std::byte> CloseFrame(uint64_t request_id) {
  return Frame(MessageKind::kCloseRequest, request_id, proto::Empty{});
}

class ServiceWaitsTest : public service_test::ServiceFixture {
 protected:
  // Client 0 an actor, client 1 a learner; one int64 column.
  void Start(ServiceOptions options, int64_t capacity = 1024) {
    ServiceFixture::Start(2, capacity, Schema{{{"id", DType::kInt64, {}}}}, options,
                          {ClientRole::kActor, ClientRole::kLearner});
  }

  Status Error(int client, uint64_t request_id) { return ErrorStatus(client, request_id); }
};

bool Mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// A sample with a timeout that the minimum size keeps waiting: answered
// DEADLINE_EXCEEDED once the timeout passes, naming what it waited for; one
// without a timeout keeps waiting and is served later.
TEST_F(ServiceWaitsTest, ASampleWaitingPastItsTimeoutIsAnsweredDeadlineExceeded) {
  Start(Options(10));
  transport_->Push(1, SampleFrame(1, 4, 0.05));
  transport_->Push(1, SampleFrame(2, 4));
  Step();
  EXPECT_TRUE(transport_->outbox(1).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  Step();
  const Status expired = Error(1, 1);
  EXPECT_EQ(expired.code(), Status::Code::kDeadlineExceeded) << expired.ToString();
  EXPECT_TRUE(Mentions(expired, "the replay holds 0 of the 10 items sampling needs")) << expired.ToString();
  EXPECT_EQ(service_->counters().deadlines_exceeded, 1);
  transport_->Push(0, AddFrame(3, 10));
  Step();
  Reply(0, MessageKind::kAddReply, 3);
  Reply(1, MessageKind::kSampleReply, 2);
}

// The defect: actors closing before --min-size-to-sample left the learner's
// sample waiting for ever. Now the waiting sample, and any later one, fails
// at once with FAILED_PRECONDITION saying why.
TEST_F(ServiceWaitsTest, WithNoActorLeftASampleThatCanNeverBeServedFailsAtOnce) {
  Start(Options(100));
  transport_->Push(0, AddFrame(1, 5));
  transport_->Push(1, SampleFrame(2, 4));
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  EXPECT_TRUE(transport_->outbox(1).empty()) << "still an actor open: the sample waits";
  transport_->Push(0, CloseFrame(3));
  Step();
  Reply(0, MessageKind::kCloseReply, 3);
  Status failed = Error(1, 2);
  EXPECT_EQ(failed.code(), Status::Code::kFailedPrecondition) << failed.ToString();
  EXPECT_TRUE(Mentions(failed, "no actor remains open")) << failed.ToString();
  EXPECT_TRUE(Mentions(failed, "holds 5 of the 100 items")) << failed.ToString();
  transport_->Push(1, SampleFrame(4, 4));
  Step();
  EXPECT_EQ(Error(1, 4).code(), Status::Code::kFailedPrecondition);
}

// Samples wait while the learner is ahead of the target ratio and go again
// once the actors insert; the ratio stays within the error buffer.
// Issue 24, defect 6: a sample that waited for its client's unread replies
// when the last actor closed, and that the rate limiter holds afterwards (the
// other learner drew what was left), fails then instead of waiting for ever.
TEST_F(ServiceWaitsTest, ASampleThatBecomesHopelessAfterTheLastActorClosedFails) {
  constexpr int kActor = 0, kLearner = 1, kOtherLearner = 2;
  ServiceOptions options = Options(8);
  options.samples_per_insert = 1.0;
  options.error_buffer = 8.0;  // 16 items in: 16 may be drawn
  options.max_unread_sample_replies = 1;
  ServiceFixture::Start(3, 64, Schema{{{"id", DType::kInt64, {}}}}, options,
                        {ClientRole::kActor, ClientRole::kLearner, ClientRole::kLearner});
  transport_->Push(kActor, AddFrame(1, 8));
  transport_->Push(kActor, AddFrame(2, 8));
  Step();
  Reply(kActor, MessageKind::kAddReply, 1);
  Reply(kActor, MessageKind::kAddReply, 2);
  transport_->Push(kLearner, SampleFrame(3, 4));
  transport_->Push(kLearner, SampleFrame(4, 4));  // waits: the reply to 3 is unread
  Step();
  transport_->Push(kActor, CloseFrame(5));
  Step();
  Reply(kActor, MessageKind::kCloseReply, 5);
  EXPECT_EQ(transport_->outbox(kLearner).size(), 1u) << "request 4 still waits, for the unread reply alone";
  transport_->Push(kOtherLearner, SampleFrame(6, 12));  // what the rate limiter has left
  Step();
  Reply(kOtherLearner, MessageKind::kSampleReply, 6);
  Reply(kLearner, MessageKind::kSampleReply, 3);  // read: now only the rate limiter holds request 4
  Step();
  const Status hopeless = Error(kLearner, 4);
  EXPECT_EQ(hopeless.code(), Status::Code::kFailedPrecondition) << hopeless.ToString();
  EXPECT_TRUE(Mentions(hopeless, "rate limiter")) << hopeless.ToString();
}

TEST_F(ServiceWaitsTest, TheRateLimiterHoldsSamplesWhileTheLearnerIsAhead) {
  ServiceOptions options = Options(10);
  options.samples_per_insert = 2.0;
  options.error_buffer = 8.0;
  Start(options);
  transport_->Push(0, AddFrame(1, 10));
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  // diff = 10 * 2 = 20 = R M: a sample of 8 leaves 12 >= 20 - 8; a second does not fit.
  transport_->Push(1, SampleFrame(2, 8));
  transport_->Push(1, SampleFrame(3, 8));
  Step();
  Reply(1, MessageKind::kSampleReply, 2);
  EXPECT_TRUE(transport_->outbox(1).empty()) << "the second sample would put the learner 16 items ahead";
  EXPECT_NE(service_->Summary().find("rate limiter samples per insert 2"), std::string::npos);
  transport_->Push(0, AddFrame(4, 4));
  Step();
  Reply(0, MessageKind::kAddReply, 4);
  Reply(1, MessageKind::kSampleReply, 3);
}

// Adds are held while the actors are ahead: acknowledged only once the
// learner samples; the actor's close waits behind its held adds; with a
// timeout a held add is refused and nothing of it stored.
TEST_F(ServiceWaitsTest, TheRateLimiterHoldsAddsWhileTheActorsAreAheadAndTheCloseWaitsBehindThem) {
  ServiceOptions options = Options(4);
  options.samples_per_insert = 1.0;
  options.error_buffer = 4.0;
  Start(options);
  transport_->Push(0, AddFrame(1, 4));        // reaches M: diff 4 = R M
  transport_->Push(0, AddFrame(2, 4));        // diff 8 <= R M + E = 8: goes
  transport_->Push(0, AddFrame(3, 4));        // 12 > 8: held
  transport_->Push(0, AddFrame(4, 1, 0.05));  // behind it, with a timeout
  transport_->Push(0, CloseFrame(5));
  Step();
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  Reply(0, MessageKind::kAddReply, 2);
  EXPECT_TRUE(transport_->outbox(0).empty()) << "add 3 is held, the close waits behind it";
  EXPECT_EQ(items().size(), 8);
  EXPECT_EQ(service_->counters().deferred_adds, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  Step();
  const Status expired = Error(0, 4);
  EXPECT_EQ(expired.code(), Status::Code::kDeadlineExceeded) << expired.ToString();
  EXPECT_TRUE(Mentions(expired, "nothing of it was stored")) << expired.ToString();
  // The learner samples 8: diff 8 - 8 = 0 >= R M - E = 0, and now add 3 fits.
  transport_->Push(1, SampleFrame(6, 8));
  Step();
  Reply(1, MessageKind::kSampleReply, 6);
  Reply(0, MessageKind::kAddReply, 3);
  Reply(0, MessageKind::kCloseReply, 5);
  EXPECT_EQ(items().size(), 12);
  EXPECT_EQ(service_->counters().limiter_overrides, 0);
}

// An error buffer too small for one add and one sample: rather than both
// waiting on each other for ever, the oldest held add goes through (counted)
// each time both sides are held.
TEST_F(ServiceWaitsTest, TheRateLimiterNeverHoldsBothSidesAtOnce) {
  ServiceOptions options = Options(2);
  options.samples_per_insert = 1.0;
  options.error_buffer = 0.0;
  Start(options);
  transport_->Push(0, AddFrame(1, 2));     // diff 2 = R M
  transport_->Push(0, AddFrame(2, 2));     // 4 > R M + E = 2: held
  transport_->Push(1, SampleFrame(3, 3));  // 2 - 3 < R M - E = 2: held
  for (int pass = 0; pass < 3; ++pass) Step();
  Reply(0, MessageKind::kAddReply, 1);
  Reply(0, MessageKind::kAddReply, 2);
  EXPECT_EQ(service_->counters().limiter_overrides, 1);
  EXPECT_TRUE(transport_->outbox(1).empty()) << "diff 4 - 3 < 2: the learner is still ahead";
  transport_->Push(0, AddFrame(4, 2));  // held (6 > 2) while the sample is: through again
  for (int pass = 0; pass < 3; ++pass) Step();
  Reply(0, MessageKind::kAddReply, 4);
  EXPECT_EQ(service_->counters().limiter_overrides, 2);
  Reply(1, MessageKind::kSampleReply, 3);
}

// With no learner left, intake is not held back.
TEST_F(ServiceWaitsTest, WithNoLearnerLeftAddsAreNotHeld) {
  ServiceOptions options = Options(2);
  options.samples_per_insert = 1.0;
  options.error_buffer = 1.0;
  Start(options);
  transport_->Push(1, CloseFrame(1));
  Step();
  Reply(1, MessageKind::kCloseReply, 1);
  for (int i = 0; i < 5; ++i) transport_->Push(0, AddFrame(10 + i, 2));
  for (int pass = 0; pass < 2; ++pass) Step();
  for (int i = 0; i < 5; ++i) Reply(0, MessageKind::kAddReply, 10 + i);
  EXPECT_EQ(service_->counters().deferred_adds, 0);
}

// The stats line says who is open, what waits and for what, and who is silent.
TEST_F(ServiceWaitsTest, TheStatsLineSaysWhatWaitsAndWhoIsSilent) {
  ServiceOptions options = Options(50);
  options.stats_interval_seconds = 0.0;
  Start(options);
  transport_->Push(0, AddFrame(1, 3));
  transport_->Push(1, SampleFrame(2, 4));
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  std::string line = service_->DescribeClients();
  EXPECT_NE(line.find("open 1 actors, 1 learners"), std::string::npos) << line;
  EXPECT_NE(line.find("waiting samples 1 (oldest "), std::string::npos) << line;
  EXPECT_NE(line.find("for the replay holds 3 of the 50 items sampling needs"), std::string::npos) << line;
  EXPECT_EQ(line.find("silent"), std::string::npos) << line;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // an interval is at least 1 s
  transport_->Push(1, SampleFrame(3, 4));
  Step();
  line = service_->DescribeClients();
  EXPECT_NE(line.find("silent: client 0 (actor) 1 s"), std::string::npos) << line;
  EXPECT_EQ(line.find("client 1 (learner)"), std::string::npos) << "the learner just sent: " << line;
  EXPECT_NE(service_->Summary().find("0 deadlines exceeded"), std::string::npos) << service_->Summary();
}

TEST(RateLimiterTest, FollowsReverbsSampleToInsertRatio) {
  RateLimiter limiter(RateLimiterOptions{4.0, 10.0, 5});
  EXPECT_FALSE(limiter.CanSample(1, 4)) << "below the minimum size";
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(limiter.CanInsert(1, i)) << "below the minimum size inserts always go";
    limiter.Inserted(1, i + 1);
  }
  EXPECT_DOUBLE_EQ(limiter.offset(), 0.0);
  EXPECT_TRUE(limiter.CanSample(10, 5));    // offset -10 = -E
  EXPECT_FALSE(limiter.CanSample(11, 5));   // -11 < -E
  EXPECT_TRUE(limiter.CanInsert(2, 5));     // offset +8 <= E
  EXPECT_FALSE(limiter.CanInsert(3, 5));    // +12 > E
  limiter.Sampled(10);
  EXPECT_DOUBLE_EQ(limiter.lowest_offset(), -10.0);
  EXPECT_FALSE(RateLimiter::Validate(RateLimiterOptions{-1.0, 0.0, 1}).ok());
  EXPECT_FALSE(RateLimiter::Validate(RateLimiterOptions{1.0, std::nan(""), 1}).ok());
  EXPECT_TRUE(RateLimiter::Validate(RateLimiterOptions{0.0, 0.0, 1}).ok());
}

}  // namespace
}  // namespace perserve::service
