// A server as one shard of several (issue 16), over the loopback transport:
// its keys carry its shard, an update's key of another shard is refused, and
// shard sample requests (a learner's share of a global sample) draw at the
// fractions given, report the shard's state, and wait like samples.
#include <cmath>
#include <cstring>
#include <deque>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using proto::MessageKind;
using service_test::Frame;

Schema IdOnly() { return Schema{{Column{"id", DType::kInt64, {}}}}; }

// An add of ids first_id.. with priorities 1, 2, 3, ... (alpha 1: the
// leaves): transitions at the end of the sender's stream.
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_id, int64_t count) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  std::vector<double> priorities(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) ids[j] = first_id + j, priorities[j] = static_cast<double>(j + 1);
  return service_test::AddFrame(request_id, proto::AppendMeta::kAtEnd, count, std::as_bytes(std::span(ids)),
                                priorities);
}

std::vector<std::byte> ShardSampleFrame(uint64_t request_id, std::vector<double> fractions, bool wait,
                                        double timeout_seconds = 0.0) {
  return Frame(MessageKind::kShardSampleRequest, request_id,
               proto::ShardSampleRequest{static_cast<int64_t>(fractions.size()), wait, timeout_seconds},
               {std::as_bytes(std::span(fractions))});
}

class ServiceShardsTest : public service_test::ServiceFixture {
 protected:
  void StartShard(int shard, int64_t min_size) {
    ServiceOptions options = Options(min_size);
    options.shard = shard;
    Start(2, 16, IdOnly(), options, {ClientRole::kActor, ClientRole::kLearner});
  }
};

TEST_F(ServiceShardsTest, KeysCarryTheShardAndAnUpdateOfAnotherShardsKeyIsRefused) {
  StartShard(3, 1);
  transport_->Push(0, AddFrame(1, 100, 4));
  Step();
  proto::AddReply added;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 1), &added).ok());
  EXPECT_EQ(added.first_key, proto::ShardKey(3, 0));
  EXPECT_EQ(proto::ShardOfKey(added.first_key), 3);

  const std::vector<uint64_t> wrong = {proto::ShardKey(3, 1), proto::ShardKey(2, 1)};
  const std::vector<double> priorities = {5.0, 5.0};
  transport_->Push(1, Frame(MessageKind::kUpdateRequest, 2, proto::UpdateRequest{2},
                            {std::as_bytes(std::span(wrong)), std::as_bytes(std::span(priorities))}));
  Step();
  const Status refused = ErrorStatus(1, 2);
  EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("belongs to shard 2; this server is shard 3"), std::string::npos)
      << refused.message();
  double leaf = 0.0;
  const std::vector<int64_t> slot = {1};
  ASSERT_TRUE(items().tree().Get(slot, std::span(&leaf, 1)).ok());
  EXPECT_EQ(leaf, 2.0) << "nothing of the refused update is applied";

  const std::vector<uint64_t> right = {proto::ShardKey(3, 1)};
  transport_->Push(1, Frame(MessageKind::kUpdateRequest, 3, proto::UpdateRequest{1},
                            {std::as_bytes(std::span(right)), std::as_bytes(std::span(priorities).first(1))}));
  Step();
  proto::UpdateReply updated;
  ASSERT_TRUE(proto::DecodeMeta(Reply(1, MessageKind::kUpdateReply, 3), &updated).ok());
  EXPECT_EQ(updated.applied, 1);
}

TEST_F(ServiceShardsTest, AShardSampleDrawsAtTheFractionsInTheirOrderAndReportsTheShard) {
  StartShard(1, 4);
  transport_->Push(0, AddFrame(1, 100, 4));  // leaves 1 2 3 4: total 10
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  // Masses 9.5 (item 3), 0.05 (item 0), 3.5 (item 2: 1 + 2 <= 3.5 < 6).
  transport_->Push(1, ShardSampleFrame(2, {0.95, 0.005, 0.35}, /*wait=*/true));
  Step();
  const proto::Frame frame = Reply(1, MessageKind::kShardSampleReply, 2);
  proto::ShardSampleReply reply;
  ASSERT_TRUE(proto::DecodeMeta(frame, &reply).ok());
  EXPECT_EQ(reply.count, 3);
  EXPECT_EQ(reply.size, 4);
  EXPECT_EQ(reply.total, 10.0);
  EXPECT_EQ(reply.min_leaf, 1.0);
  EXPECT_TRUE(reply.ready);
  ASSERT_EQ(frame.bulk.size(), 3u * (8 + 8 + 8));
  uint64_t keys[3];
  double leaves[3];
  int64_t ids[3];
  std::memcpy(keys, frame.bulk.data(), 24);
  std::memcpy(leaves, frame.bulk.data() + 24, 24);
  std::memcpy(ids, frame.bulk.data() + 48, 24);
  EXPECT_EQ(keys[0], proto::ShardKey(1, 3));
  EXPECT_EQ(keys[1], proto::ShardKey(1, 0));
  EXPECT_EQ(keys[2], proto::ShardKey(1, 2));
  EXPECT_EQ(leaves[0], 4.0);
  EXPECT_EQ(leaves[1], 1.0);
  EXPECT_EQ(leaves[2], 3.0);
  EXPECT_EQ(ids[0], 103);
  EXPECT_EQ(ids[1], 100);
  EXPECT_EQ(ids[2], 102);
}

TEST_F(ServiceShardsTest, AProbeAnswersAtOnceAndAWaitingOneWhenTheShardIsReady) {
  StartShard(0, 4);
  transport_->Push(1, ShardSampleFrame(1, {}, /*wait=*/false));
  transport_->Push(1, ShardSampleFrame(2, {}, /*wait=*/true));
  transport_->Push(1, ShardSampleFrame(3, {0.5}, /*wait=*/true));
  Step();
  proto::ShardSampleReply probe;
  ASSERT_TRUE(proto::DecodeMeta(Reply(1, MessageKind::kShardSampleReply, 1), &probe).ok());
  EXPECT_EQ(probe.size, 0);
  EXPECT_FALSE(probe.ready);
  EXPECT_TRUE(transport_->outbox(1).empty()) << "the waiting probe and sample wait for 4 items";
  transport_->Push(0, AddFrame(4, 0, 4));
  Step();
  Reply(0, MessageKind::kAddReply, 4);
  ASSERT_TRUE(proto::DecodeMeta(Reply(1, MessageKind::kShardSampleReply, 2), &probe).ok());
  EXPECT_TRUE(probe.ready);
  EXPECT_EQ(probe.count, 0);
  ASSERT_TRUE(proto::DecodeMeta(Reply(1, MessageKind::kShardSampleReply, 3), &probe).ok());
  EXPECT_EQ(probe.count, 1);
}

TEST_F(ServiceShardsTest, AWaitingProbeFailsAtOnceWhenNoActorCanFillTheShard) {
  StartShard(0, 4);
  transport_->Push(0, Frame(MessageKind::kCloseRequest, 1, proto::Empty{}));
  Step();
  Reply(0, MessageKind::kCloseReply, 1);
  transport_->Push(1, ShardSampleFrame(2, {}, /*wait=*/true));
  Step();
  const Status hopeless = ErrorStatus(1, 2);
  EXPECT_EQ(hopeless.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(hopeless.message().find("no actor remains open"), std::string::npos) << hopeless.message();
  // The shard's state, which the learner expects (it leaves the shard out),
  // not an error of the service: an actor-less shard that works counts none.
  EXPECT_EQ(service_->counters().errors, 0);
}

TEST_F(ServiceShardsTest, AWaitingProbeFailsWhenTheLastActorClosesAndCountsNoError) {
  StartShard(0, 4);
  transport_->Push(1, ShardSampleFrame(1, {}, /*wait=*/true));
  Step();
  EXPECT_TRUE(transport_->outbox(1).empty()) << "the probe waits for 4 items";
  transport_->Push(0, Frame(MessageKind::kCloseRequest, 2, proto::Empty{}));
  Step();
  Reply(0, MessageKind::kCloseReply, 2);
  EXPECT_EQ(ErrorStatus(1, 1).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(service_->counters().errors, 0);
}

TEST_F(ServiceShardsTest, BadShardSamplesGetTypedErrors) {
  StartShard(0, 1);
  transport_->Push(0, AddFrame(1, 0, 4));
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  transport_->Push(1, ShardSampleFrame(2, {1.0}, true));          // past the total
  transport_->Push(1, ShardSampleFrame(3, {std::nan("")}, true));  // NaN
  transport_->Push(1, ShardSampleFrame(4, {-0.1}, true));
  const std::vector<double> one = {0.5};
  transport_->Push(1, Frame(MessageKind::kShardSampleRequest, 5, proto::ShardSampleRequest{2, true, 0.0},
                            {std::as_bytes(std::span(one))}));  // count 2, one fraction
  transport_->Push(1, Frame(MessageKind::kShardSampleRequest, 6, proto::ShardSampleRequest{-1, true, 0.0}));
  Step();
  Step();
  for (uint64_t id = 2; id <= 6; ++id) {
    EXPECT_EQ(ErrorStatus(1, id).code(), Status::Code::kInvalidArgument) << "request " << id;
  }
  EXPECT_EQ(items().counters().items_sampled, 0);
}

}  // namespace
}  // namespace perserve::service
