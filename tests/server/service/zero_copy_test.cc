// Sample replies sent from the store (ServiceOptions::zero_copy_min_row_bytes):
// over a LoopbackTransport that, like MPI, reads a reply's rows only when the
// learner receives it. What a sample sees: the rows of its keys as they were
// when it was drawn, whole, however many adds come meanwhile; an add that
// would overwrite rows of a reply still in flight waits until it is received.
#include <cstring>

#include <gtest/gtest.h>

#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using proto::MessageKind;
using service_test::Frame;

constexpr int kActor = 0, kLearner = 1;
constexpr int64_t kCapacity = 64;
constexpr int64_t kPad = 24;

Schema RowSchema() { return Schema{{{"id", DType::kInt64, {}}, {"pad", DType::kUInt8, {kPad}}}}; }

uint8_t PadByte(int64_t id, int64_t j) { return static_cast<uint8_t>(id * 7 + j); }

// Items first_id, first_id + 1, ...: each row's id, and pad bytes derived from it.
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_id, int64_t count) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> pads;
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(first_id + i);
    for (int64_t j = 0; j < kPad; ++j) pads.push_back(PadByte(first_id + i, j));
  }
  return Frame(MessageKind::kAddRequest, request_id, proto::AddRequest{count, false},
               {std::as_bytes(std::span(ids)), std::as_bytes(std::span(pads))});
}

class ZeroCopyTest : public service_test::ServiceFixture {
 protected:
  void SetUp() override {
    ServiceOptions options = Options(1);
    options.zero_copy_min_row_bytes = 0;  // every reply from the store
    Start(2, kCapacity, RowSchema(), options, {ClientRole::kActor, ClientRole::kLearner});
    transport_->SendRowsInPlace(true);
  }

  // Adds `batches` batches of 8 items, ids from first_id, request ids from first_request.
  void PushAdds(int64_t first_id, int batches, uint64_t first_request) {
    for (int b = 0; b < batches; ++b) transport_->Push(kActor, AddFrame(first_request + b, first_id + 8 * b, 8));
  }

  // Pops the sample reply to `request_id` and checks every row is whole and
  // is the row added for its key (key k was added as id k: one actor, keys
  // in order from 0). Returns its keys.
  std::vector<uint64_t> CheckSample(uint64_t request_id, int64_t batch) {
    const proto::Frame reply = Reply(kLearner, MessageKind::kSampleReply, request_id);
    EXPECT_EQ(reply.bulk.size(), static_cast<size_t>(batch * (3 * 8 + 8 + kPad)));
    std::vector<uint64_t> keys(static_cast<size_t>(batch));
    if (reply.bulk.size() != static_cast<size_t>(batch * (3 * 8 + 8 + kPad))) return keys;
    std::memcpy(keys.data(), reply.bulk.data(), keys.size() * 8);
    const std::byte* ids = reply.bulk.data() + batch * 24;
    const std::byte* pads = ids + batch * 8;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t id = 0;
      std::memcpy(&id, ids + 8 * i, 8);
      EXPECT_EQ(static_cast<uint64_t>(id), keys[i]) << "row " << i << ": the id column is another item's";
      for (int64_t j = 0; j < kPad; ++j) {
        EXPECT_EQ(static_cast<uint8_t>(pads[i * kPad + j]), PadByte(static_cast<int64_t>(keys[i]), j))
            << "row " << i << " (key " << keys[i] << ") is torn at pad byte " << j;
      }
    }
    return keys;
  }

  // Passes of the loop (each takes at most 4 messages of a client).
  void Steps(int passes) {
    for (int pass = 0; pass < passes; ++pass) Step();
  }

  int Acknowledged() {
    int acks = 0;
    for (const auto& frame : transport_->outbox(kActor)) {
      proto::Frame decoded;
      acks += proto::DecodeFrame(frame, &decoded).ok() && decoded.kind() == MessageKind::kAddReply;
    }
    return acks;
  }
};

TEST_F(ZeroCopyTest, RowsInFlightAreNeverOverwrittenAndAddsWaitForThem) {
  PushAdds(0, 8, 1);  // fills the ring: ids 0..63 in slots 0..63
  Steps(2);
  ASSERT_EQ(Acknowledged(), 8);
  transport_->outbox(kActor).clear();

  // Two samples in flight, unread: their rows stay where they are in the store.
  transport_->Push(kLearner, Frame(MessageKind::kSampleRequest, 100, proto::SampleRequest{64, 0.5}));
  transport_->Push(kLearner, Frame(MessageKind::kSampleRequest, 101, proto::SampleRequest{64, 0.5}));
  Step();
  ASSERT_EQ(transport_->in_flight(), 2u);
  EXPECT_TRUE(transport_->outbox(kLearner).empty());

  // A whole ring of new items comes: every add that would overwrite a pinned
  // row waits (the first, onto the slots next in line, copied into the
  // replies, goes through).
  PushAdds(64, 8, 10);
  Steps(4);
  const int acknowledged_while_pinned = Acknowledged();
  EXPECT_LT(acknowledged_while_pinned, 8);
  EXPECT_GT(service_->counters().pinned_adds, 0);
  EXPECT_NE(service_->DescribeClients().find("would overwrite rows of a sample reply client 1 has not received yet"),
            std::string::npos)
      << service_->DescribeClients();

  // The learner reads the first reply: its rows are those of its keys, whole.
  ASSERT_TRUE(transport_->Deliver(kLearner));
  const std::vector<uint64_t> first = CheckSample(100, 64);
  for (uint64_t key : first) EXPECT_LT(key, 64u);
  Step();
  // The second still pins its rows: adds onto them still wait.
  EXPECT_LT(Acknowledged(), 8);

  ASSERT_TRUE(transport_->Deliver(kLearner));
  CheckSample(101, 64);
  Steps(2);
  EXPECT_EQ(Acknowledged(), 8) << "every held add is stored once no reply pins its slots";
  EXPECT_EQ(replay_->next_key(), 128u);

  // Held adds were stored in order: a new sample sees ids 64..127 under their keys.
  transport_->Push(kLearner, Frame(MessageKind::kSampleRequest, 102, proto::SampleRequest{64, 0.5}));
  Step();
  ASSERT_TRUE(transport_->Deliver(kLearner));
  for (uint64_t key : CheckSample(102, 64)) EXPECT_GE(key, 64u);
}

TEST_F(ZeroCopyTest, RowsNextInLineAreCopiedSoTheNextAddsNeverWait) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  transport_->Push(kLearner, Frame(MessageKind::kSampleRequest, 100, proto::SampleRequest{64, 0.5}));
  Step();
  // The next capacity / 8 slots were copied into the reply: an add of them goes through.
  PushAdds(64, 1, 10);
  Step();
  EXPECT_EQ(Acknowledged(), 1);
  EXPECT_EQ(service_->counters().pinned_adds, 0);
  ASSERT_TRUE(transport_->Deliver(kLearner));
  CheckSample(100, 64);  // ids 0..7 as drawn, though slots 0..7 now hold 64..71
}

}  // namespace
}  // namespace perserve::service
