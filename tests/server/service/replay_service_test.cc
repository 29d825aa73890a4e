// The service loop over the loopback transport: replies, typed errors for bad
// input (and serving on afterwards), deferred samples, fairness, shutdown.
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using proto::MessageKind;
using service_test::Frame;

Schema IdSchema() { return Schema{{{"id", DType::kInt64, {}}, {"tag", DType::kUInt8, {2}}}}; }

// An add (an append of `count` transitions at the end of the sender's
// stream, each its own item) of items numbered first_item ..
std::vector<std::byte> AddFrame(uint64_t id, int64_t first_item, int64_t count, const std::vector<double>& priorities) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> tags;
  for (int64_t j = 0; j < count; ++j) {
    ids.push_back(first_item + j);
    tags.push_back(static_cast<uint8_t>(first_item + j));
    tags.push_back(static_cast<uint8_t>(255 - first_item - j));
  }
  std::vector<std::byte> columns;
  const auto id_bytes = std::as_bytes(std::span(ids));
  const auto tag_bytes = std::as_bytes(std::span(tags));
  columns.insert(columns.end(), id_bytes.begin(), id_bytes.end());
  columns.insert(columns.end(), tag_bytes.begin(), tag_bytes.end());
  return service_test::AddFrame(id, proto::AppendMeta::kAtEnd, count, columns, priorities);
}


class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(2, 1); }

  void Start(int clients, int64_t min_size, int messages_per_client_pass = 4, double alpha = 1.0) {
    transport_ = std::make_unique<LoopbackTransport>(clients);
    replay::step_test::StepFixture fixture;
    ASSERT_TRUE(replay::step_test::MakeTransitionReplay(IdSchema(), 64, clients, &fixture, alpha, 3).ok());
    replay_ = std::move(fixture.steps);
    ServiceOptions options{min_size, 0.0};
    options.messages_per_client_pass = messages_per_client_pass;
    service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
  }

  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }

  // Pops client's oldest reply, checks its kind and request id.
  proto::Frame Reply(int client, MessageKind kind, uint64_t id) {
    return service_test::PopReply(*transport_, client, kind, id, kept_);
  }

  Status::Code ErrorCode(int client, uint64_t id) {
    const proto::Frame frame = Reply(client, MessageKind::kErrorReply, id);
    proto::ErrorReply error;
    EXPECT_TRUE(proto::DecodeMeta(frame, &error).ok());
    return static_cast<Status::Code>(error.code);
  }

  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<ReplayService> service_;
  std::deque<std::vector<std::byte>> kept_;  // the replies' bytes, which decoded frames point into
};

// Issue 25 through the service: with alpha 2 an update to 1e-200 made its
// leaf 0, the min 0, and every weight in every later sample reply 0.
TEST_F(ServiceTest, AnUpdateWhosePowerUnderflowsLeavesEverySampledWeightPositive) {
  Start(2, 1, 4, /*alpha=*/2.0);
  transport_->Push(0, AddFrame(1, 0, 8, {1, 2, 3, 4, 5, 6, 7, 8}));
  Step();
  Reply(0, MessageKind::kAddReply, 1);
  const std::vector<uint64_t> keys = {0};
  const std::vector<double> priorities = {1e-200};
  transport_->Push(1, Frame(MessageKind::kUpdateRequest, 2, proto::UpdateRequest{1},
                            {std::as_bytes(std::span(keys)), std::as_bytes(std::span(priorities))}));
  Step();
  proto::UpdateReply updated;
  ASSERT_TRUE(proto::DecodeMeta(Reply(1, MessageKind::kUpdateReply, 2), &updated).ok());
  EXPECT_EQ(updated.applied, 1);
  transport_->Push(1, Frame(MessageKind::kSampleRequest, 3, proto::SampleRequest{64, 0.4}));
  Step();
  const proto::Frame sample = Reply(1, MessageKind::kSampleReply, 3);
  ASSERT_GE(sample.bulk.size(), 64u * 24);
  for (int i = 0; i < 64; ++i) {
    double weight = 0.0;
    std::memcpy(&weight, sample.bulk.data() + 64 * 8 + 8 * i, 8);
    EXPECT_GT(weight, 0.0) << "draw " << i;
    EXPECT_LE(weight, 1.0) << "draw " << i;
  }
}

TEST_F(ServiceTest, AddSampleUpdateCloseRoundTrip) {
  transport_->Push(0, AddFrame(1, 0, 4, {1.0, 2.0, 3.0, 4.0}));
  Step();
  proto::AddReply added;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 1), &added).ok());
  EXPECT_EQ(added.first_key, 0u);
  EXPECT_EQ(added.count, 4);

  transport_->Push(1, Frame(MessageKind::kSampleRequest, 2, proto::SampleRequest{8, 0.5}));
  Step();
  const proto::Frame sample = Reply(1, MessageKind::kSampleReply, 2);
  ASSERT_EQ(sample.bulk.size(), 8 * (3 * 8 + 8 + 2));
  for (int i = 0; i < 8; ++i) {
    uint64_t key;
    int64_t id;
    std::memcpy(&key, sample.bulk.data() + 8 * i, 8);
    std::memcpy(&id, sample.bulk.data() + 24 * 8 + 8 * i, 8);
    const auto tag0 = static_cast<uint8_t>(sample.bulk[24 * 8 + 8 * 8 + 2 * i]);
    EXPECT_EQ(static_cast<uint64_t>(id), key) << "the bytes sampled for a key are the bytes added for it";
    EXPECT_EQ(tag0, static_cast<uint8_t>(id));
  }

  const std::vector<uint64_t> keys = {0, 3};
  const std::vector<double> priorities = {9.0, 0.5};
  transport_->Push(1, Frame(MessageKind::kUpdateRequest, 3, proto::UpdateRequest{2},
                            {std::as_bytes(std::span(keys)), std::as_bytes(std::span(priorities))}));
  Step();
  proto::UpdateReply updated;
  ASSERT_TRUE(proto::DecodeMeta(Reply(1, MessageKind::kUpdateReply, 3), &updated).ok());
  EXPECT_EQ(updated.applied, 2);
  EXPECT_EQ(replay_->items().tree().Total(), 9.0 + 2.0 + 3.0 + 0.5);

  transport_->Push(0, Frame(MessageKind::kCloseRequest, 4, proto::Empty{}));
  transport_->Push(1, Frame(MessageKind::kCloseRequest, 5, proto::Empty{}));
  EXPECT_FALSE(service_->done());
  Step();
  Reply(0, MessageKind::kCloseReply, 4);
  Reply(1, MessageKind::kCloseReply, 5);
  EXPECT_TRUE(service_->done());
}

TEST_F(ServiceTest, BadInputGetsTypedErrorsAndNothingIsApplied) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::byte> wrong_version = AddFrame(13, 0, 2, {});
  const uint16_t version = proto::kProtocolVersion + 1;
  std::memcpy(wrong_version.data() + 4, &version, sizeof(version));
  std::vector<std::byte> truncated = AddFrame(14, 0, 2, {});
  truncated.resize(truncated.size() - 5);
  std::vector<std::byte> garbage_meta = Frame(MessageKind::kSampleRequest, 15, proto::SampleRequest{4, 0.1});
  garbage_meta.resize(proto::kFrameHeaderBytes + 3);  // meta cut short, header patched to match
  const uint32_t meta_bytes = 3;
  std::memcpy(garbage_meta.data() + 16, &meta_bytes, sizeof(meta_bytes));
  const std::vector<uint64_t> unknown_key = {0, 500};
  const std::vector<double> two = {1.0, 1.0};
  const std::vector<uint64_t> one_key = {0};
  const std::vector<double> negative = {-1.0};
  const std::vector<std::byte> columns_wrong(11);
  proto::AppendMeta two_adds;  // 2 transitions, whose 20 bytes of columns are 11
  two_adds.first_step = proto::AppendMeta::kAtEnd;
  two_adds.steps = 2;
  two_adds.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, false}};
  proto::AppendMeta huge_add = two_adds;
  huge_add.steps = int64_t{1} << 62;
  huge_add.groups[0].has_priorities = true;

  struct Case {
    std::vector<std::byte> frame;
    uint64_t id;
    Status::Code code;
  };
  const std::vector<Case> cases = {
      {std::vector<std::byte>(7, std::byte{0x5a}), 0, Status::Code::kInvalidArgument},   // garbage
      {std::vector<std::byte>(64, std::byte{0x00}), 0, Status::Code::kInvalidArgument},  // bad magic
      {wrong_version, 13, Status::Code::kFailedPrecondition},
      {truncated, 14, Status::Code::kInvalidArgument},  // sizes no longer add up; the id still answers
      {garbage_meta, 15, Status::Code::kInvalidArgument},
      {Frame(static_cast<MessageKind>(77), 16, proto::Empty{}), 16, Status::Code::kUnimplemented},
      {AddFrame(17, 0, 2, {1.0, nan}), 17, Status::Code::kInvalidArgument},
      {AddFrame(18, 0, 2, {1.0, -3.0}), 18, Status::Code::kInvalidArgument},
      {Frame(MessageKind::kAppendRequest, 19, two_adds, {std::span<const std::byte>(columns_wrong)}), 19,
       Status::Code::kInvalidArgument},
      {Frame(MessageKind::kAppendRequest, 20, huge_add), 20, Status::Code::kInvalidArgument},
      {Frame(MessageKind::kSampleRequest, 21, proto::SampleRequest{0, 0.4}), 21, Status::Code::kInvalidArgument},
      {Frame(MessageKind::kSampleRequest, 25, proto::SampleRequest{int64_t{1} << 62, 0.4}), 25,
       Status::Code::kInvalidArgument},
      {Frame(MessageKind::kUpdateRequest, 22, proto::UpdateRequest{1}, {std::as_bytes(std::span(one_key))}), 22,
       Status::Code::kInvalidArgument},
      {Frame(MessageKind::kUpdateRequest, 23, proto::UpdateRequest{int64_t{1} << 61}), 23,
       Status::Code::kInvalidArgument},
  };
  for (const Case& c : cases) {
    transport_->Push(0, c.frame);
    Step();
    EXPECT_EQ(ErrorCode(0, c.id), c.code) << "request " << c.id;
  }
  transport_->Push(0, AddFrame(24, 0, 2, {}), /*tag=*/proto::kRequestTag + 40);
  Step();
  EXPECT_EQ(ErrorCode(0, 24), Status::Code::kUnimplemented) << "unknown tag";
  EXPECT_EQ(replay_->items().next_key(), 0u) << "a rejected add stored something";
  EXPECT_EQ(replay_->next_step_key(), 0u) << "a rejected add stored steps";
  EXPECT_EQ(replay_->stream_steps(0), 0);

  // The server still serves, and later requests see nothing of the rejected ones.
  transport_->Push(0, AddFrame(30, 0, 2, {1.0, 2.0}));
  Step();
  proto::AddReply added;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 30), &added).ok());
  EXPECT_EQ(added.first_key, 0u);
  transport_->Push(0, Frame(MessageKind::kUpdateRequest, 31, proto::UpdateRequest{2},
                            {std::as_bytes(std::span(unknown_key)), std::as_bytes(std::span(two))}));
  transport_->Push(0, Frame(MessageKind::kUpdateRequest, 32, proto::UpdateRequest{1},
                            {std::as_bytes(std::span(one_key)), std::as_bytes(std::span(negative))}));
  Step();
  Step();
  EXPECT_EQ(ErrorCode(0, 31), Status::Code::kNotFound);
  EXPECT_EQ(ErrorCode(0, 32), Status::Code::kInvalidArgument);
  EXPECT_EQ(replay_->items().tree().Total(), 3.0) << "a rejected update changed a priority";
  EXPECT_EQ(service_->counters().errors, static_cast<int64_t>(cases.size()) + 3);
}

TEST_F(ServiceTest, SampleWaitsForMinSizeWithoutBlockingOthers) {
  Start(3, 10);
  transport_->Push(2, Frame(MessageKind::kSampleRequest, 1, proto::SampleRequest{4, 0.4}));
  transport_->Push(0, AddFrame(2, 0, 6, {}));
  Step();
  Reply(0, MessageKind::kAddReply, 2);
  EXPECT_TRUE(transport_->outbox(2).empty()) << "served before min size";
  transport_->Push(1, AddFrame(3, 6, 4, {}));
  Step();
  Reply(1, MessageKind::kAddReply, 3);
  Reply(2, MessageKind::kSampleReply, 1);
  EXPECT_EQ(service_->counters().deferred_samples, 1);
}

TEST_F(ServiceTest, AFloodingClientCannotDelayAnotherBeyondOnePass) {
  for (int cap : {1, 4}) {
    Start(3, 1, cap);
    transport_->Push(1, AddFrame(1, 0, 1, {}));
    Step();
    Reply(1, MessageKind::kAddReply, 1);
    for (uint64_t i = 0; i < 200; ++i) transport_->Push(0, AddFrame(100 + i, 1 + i, 1, {}));
    transport_->Push(1, AddFrame(2, 500, 1, {}));
    transport_->Push(2, Frame(MessageKind::kSampleRequest, 3, proto::SampleRequest{4, 0.4}));
    Step();  // one pass: at most `cap` messages from each client
    Reply(1, MessageKind::kAddReply, 2);
    Reply(2, MessageKind::kSampleReply, 3);
    EXPECT_EQ(transport_->outbox(0).size(), static_cast<size_t>(cap)) << "cap " << cap;
    EXPECT_EQ(transport_->waiting(0), static_cast<size_t>(200 - cap)) << "cap " << cap;
  }
}

// The byte budget: once a pass has taken that much from a client, it moves on
// (but always takes one message, however large).
TEST_F(ServiceTest, APassTakesNoMoreThanItsByteBudgetFromAClient) {
  Start(2, 1);
  const std::vector<std::byte> batch = AddFrame(1, 0, 4, {});
  ServiceOptions options{1, 0.0};
  options.messages_per_client_pass = 4;
  options.bytes_per_client_pass = static_cast<int64_t>(2 * batch.size());  // two batches' worth
  service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
  for (uint64_t i = 0; i < 6; ++i) transport_->Push(0, AddFrame(10 + i, 4 * i, 4, {}));
  Step();
  EXPECT_EQ(transport_->outbox(0).size(), 2u);
  options.bytes_per_client_pass = 1;  // less than any message: still one per pass
  service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
  Step();
  EXPECT_EQ(transport_->outbox(0).size(), 3u);
  EXPECT_EQ(transport_->waiting(0), 3u);
}

TEST_F(ServiceTest, ClosingDropsADeferredSampleAndTheLoopEnds) {
  Start(2, 100);
  transport_->Push(1, Frame(MessageKind::kSampleRequest, 1, proto::SampleRequest{4, 0.4}));
  Step();
  transport_->Push(1, Frame(MessageKind::kCloseRequest, 2, proto::Empty{}));
  Step();
  Reply(1, MessageKind::kCloseReply, 2);
  EXPECT_TRUE(transport_->outbox(1).empty());
  transport_->Push(0, Frame(MessageKind::kCloseRequest, 3, proto::Empty{}));
  ASSERT_TRUE(service_->Run().ok());  // returns once the last client has closed
  Reply(0, MessageKind::kCloseReply, 3);
}

}  // namespace
}  // namespace perserve::service
