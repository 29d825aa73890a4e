// The data path without copies in the server, for a table of transitions
// (each step its own item). Sample replies sent from the step ring
// (ServiceOptions::zero_copy_min_row_bytes): over a LoopbackTransport that,
// like MPI, reads a reply's rows only when the learner receives it. What a
// sample sees: the rows of its keys as they were when it was drawn, whole,
// however many adds come meanwhile; the ring's slack (as many free slots
// past its newest step as it holds steps, at this size) takes a whole ring
// of adds, and an add that would overwrite rows of a reply still in flight
// waits until it is received. (Adds whose columns come apart:
// columns_apart_test.cc.)
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "server/service/padded_rows.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using padded_rows::AddFrame;
using padded_rows::kActor;
using padded_rows::kCapacity;
using padded_rows::kLearner;
using padded_rows::kPad;
using padded_rows::PadByte;
using padded_rows::RowSchema;
using proto::MessageKind;
using service_test::Frame;

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

  // A sample request of `batch` items whose reply the learner awaits (its
  // rows may go from the store) or, `awaited` false, prefetched (copied).
  void PushSample(uint64_t request_id, int64_t batch, bool awaited = true) {
    transport_->Push(kLearner, Frame(MessageKind::kSampleRequest, request_id,
                                     proto::SampleRequest{batch, 0.5, 0.0, awaited}));
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
  ASSERT_EQ(replay_->steps().slack(), kCapacity);
  PushAdds(0, 8, 1);  // fills the ring: ids 0..63 in step slots 0..63
  Steps(2);
  ASSERT_EQ(Acknowledged(), 8);
  transport_->outbox(kActor).clear();

  // Two samples in flight, unread: their rows (every held one: 64 strata over
  // 64 equal leaves) stay where they are in the ring.
  PushSample(100, 64);
  PushSample(101, 64);
  Step();
  ASSERT_EQ(transport_->in_flight(), 2u);
  EXPECT_EQ(service_->counters().zero_copy_replies, 2);
  EXPECT_TRUE(transport_->outbox(kLearner).empty());

  // Two whole rings of new items come: the first goes into the slack (slots
  // 64..127, which hold no row a reply reads) and pushes ids 0..63 out of the
  // table; every add after it would overwrite a pinned row, and waits.
  PushAdds(64, 16, 10);
  Steps(8);
  EXPECT_EQ(Acknowledged(), 8);
  EXPECT_GT(service_->counters().pinned_adds, 0);
  EXPECT_EQ(items().oldest_key(), 64u);
  EXPECT_NE(service_->DescribeClients().find("would overwrite rows of a sample reply client 1 has not received yet"),
            std::string::npos)
      << service_->DescribeClients();

  // The learner reads the first reply: its rows are those of its keys, whole,
  // though the keys are no longer held.
  ASSERT_TRUE(transport_->Deliver(kLearner));
  const std::vector<uint64_t> first = CheckSample(100, 64);
  for (uint64_t key : first) EXPECT_LT(key, 64u);
  Step();
  // The second still pins its rows: adds onto them still wait.
  EXPECT_EQ(Acknowledged(), 8);

  ASSERT_TRUE(transport_->Deliver(kLearner));
  CheckSample(101, 64);
  Steps(2);
  EXPECT_EQ(Acknowledged(), 16) << "every held add is stored once no reply pins its slots";
  EXPECT_EQ(items().next_key(), 192u);

  // Held adds were stored in order: a new sample sees ids 128..191 under their keys.
  PushSample(102, 64);
  Step();
  ASSERT_TRUE(transport_->Deliver(kLearner));
  for (uint64_t key : CheckSample(102, 64)) EXPECT_GE(key, 128u);
}

// The slack past the ring's newest step holds no row a reply reads: a whole
// ring of adds goes there at once while every held row is in flight, and
// the reply still reads its rows as drawn. (It replaced the test of the rows
// next in line being copied: at this size the slack is as long as the ring,
// so no held row is ever within the copy guard, an eighth of the slots,
// ahead of the next write.)
TEST_F(ZeroCopyTest, TheSlackTakesAWholeRingOfAddsWhileRowsAreInFlight) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  PushSample(100, 64);
  Step();
  PushAdds(64, 8, 10);
  Steps(2);
  EXPECT_EQ(Acknowledged(), 8);
  EXPECT_EQ(service_->counters().pinned_adds, 0);
  ASSERT_TRUE(transport_->Deliver(kLearner));
  CheckSample(100, 64);  // ids 0..63 as drawn, though the table holds 64..127 now
}

// Issue 24's finding 7: an add past its timeout says what held it (here the
// rows of a reply in flight; it always blamed the rate limiter).
TEST_F(ZeroCopyTest, AnAddPastItsTimeoutSaysTheRowsInFlightHeldIt) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  PushSample(100, 64);
  Step();
  transport_->Push(kActor, AddFrame(10, 64, 64));  // into the slack: goes
  transport_->Push(kActor, AddFrame(11, 128, 8, /*timeout_seconds=*/0.02));  // onto pinned slots 0..7
  Step();
  EXPECT_EQ(service_->held_adds(kActor), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  Step();
  transport_->outbox(kActor).pop_front();  // request 10's acknowledgement
  const Status expired = ErrorStatus(kActor, 11);
  EXPECT_EQ(expired.code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(expired.message().find("for rows it would overwrite, of a sample reply client 1 has not received yet"),
            std::string::npos)
      << expired.message();
  EXPECT_EQ(expired.message().find("rate limiter"), std::string::npos) << expired.message();
  EXPECT_EQ(items().next_key(), 128u) << "nothing of the expired add was stored";
  EXPECT_EQ(replay_->stream_steps(kActor), 128);
}

// Issue 24's finding 2: a prefetched request's reply may stay unread while
// the learner waits for the actors (a barrier); its rows pinned in the ring
// held their adds for ever. They are copied: two whole rings of adds go
// through, and the replies still hold the rows as drawn.
TEST_F(ZeroCopyTest, APrefetchedReplysRowsAreCopiedSoNoAddWaitsForThem) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  PushSample(100, 64, /*awaited=*/false);
  PushSample(101, 64, /*awaited=*/false);
  Step();
  PushAdds(64, 16, 10);
  Steps(8);
  EXPECT_EQ(Acknowledged(), 16) << "no add waits for the unread replies";
  EXPECT_EQ(service_->counters().pinned_adds, 0);
  EXPECT_EQ(service_->counters().zero_copy_replies, 0);
  while (transport_->Deliver(kLearner)) {
  }
  for (uint64_t key : CheckSample(100, 64)) EXPECT_LT(key, 64u);
  for (uint64_t key : CheckSample(101, 64)) EXPECT_LT(key, 64u);
}

}  // namespace
}  // namespace perserve::service
