// Transitions as one-step items through the service (issue 33, the one item
// model): an add is an append whose steps are its items, at the end of its
// sender's stream; a sample returns each item's step row, gathered when rows
// are small and sent from the ring when they are at least
// zero_copy_min_row_bytes (pinned there while in flight, so an append that
// would overwrite them waits); updates apply to held items, and the items
// whose steps the ring overwrote are gone: their keys stale.
#include <cstring>
#include <deque>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "server/service/padded_rows.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using padded_rows::AddFrame;
using padded_rows::kPad;
using padded_rows::PadByte;
using padded_rows::RowSchema;
using proto::MessageKind;
using service_test::Frame;

constexpr int kActor = 0, kOtherActor = 1, kLearner = 2;
constexpr int64_t kRing = 8;  // steps, and items
constexpr int64_t kRowBytes = 8 + kPad;

class TransitionServiceTest : public service_test::ServiceFixture {
 protected:
  // zero_copy_min_row_bytes as given; sends of rows from the ring travel as MPI's do.
  void Start(int64_t zero_copy_min_row_bytes) {
    ServiceOptions options = Options(1);
    options.zero_copy_min_row_bytes = zero_copy_min_row_bytes;
    ServiceFixture::Start(3, kRing, RowSchema(), options,
                          {ClientRole::kActor, ClientRole::kActor, ClientRole::kLearner});
    transport_->SendRowsInPlace(true);
  }

  // Pops the learner's sample reply: its keys, each row checked against the
  // id `id_of` says its key was added with.
  template <class IdOf>
  std::vector<uint64_t> CheckSample(uint64_t request_id, int64_t batch, IdOf id_of) {
    const proto::Frame reply = Reply(kLearner, MessageKind::kSampleReply, request_id);
    std::vector<uint64_t> keys(static_cast<size_t>(batch));
    EXPECT_EQ(reply.bulk.size(), static_cast<size_t>(batch * (24 + kRowBytes)));
    if (reply.bulk.size() != static_cast<size_t>(batch * (24 + kRowBytes))) return keys;
    std::memcpy(keys.data(), reply.bulk.data(), keys.size() * 8);
    const std::byte* ids = reply.bulk.data() + 24 * batch;
    const std::byte* pads = ids + 8 * batch;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t id = -1;
      std::memcpy(&id, ids + 8 * i, 8);
      EXPECT_EQ(id, id_of(keys[i])) << "key " << keys[i];
      for (int64_t j = 0; j < kPad; ++j) EXPECT_EQ(static_cast<uint8_t>(pads[i * kPad + j]), PadByte(id, j));
    }
    return keys;
  }

  // A sample the learner awaits (its rows may go from the ring).
  void PushSample(uint64_t request_id, int64_t batch) {
    transport_->Push(kLearner,
                     Frame(MessageKind::kSampleRequest, request_id, proto::SampleRequest{batch, 0.5, 0.0, true}));
  }
};

// Each add goes at its sender's stream's end; its items are its steps, keyed
// in arrival order; each item's row is the step row it was added with.
TEST_F(TransitionServiceTest, AnAddsItemsAreItsStepsAtTheEndOfItsStream) {
  Start(-1);
  transport_->Push(kActor, AddFrame(1, 100, 3));
  transport_->Push(kOtherActor, AddFrame(2, 200, 2));
  Step();
  EXPECT_EQ(Added(kActor, 1).first_key, 0u);
  EXPECT_EQ(Added(kOtherActor, 2).first_key, 3u);
  EXPECT_EQ(replay_->stream_steps(kActor), 3);
  EXPECT_EQ(replay_->stream_steps(kOtherActor), 2);
  EXPECT_EQ(items().size(), 5);
  for (uint64_t key = 0; key < 5; ++key) {
    EXPECT_EQ(StoredId(key), key < 3 ? 100 + static_cast<int64_t>(key) : 197 + static_cast<int64_t>(key));
    // The item at step key k is that step: the same key, stream and index.
    const store::StepInfo& step = replay_->steps().Info(key);
    EXPECT_EQ(step.stream, key < 3 ? kActor : kOtherActor);
    EXPECT_EQ(step.index, key < 3 ? static_cast<int64_t>(key) : static_cast<int64_t>(key) - 3);
  }
  // An add refused whole (a bad priority) leaves its stream where it was; the next goes on from there.
  transport_->Push(kActor, service_test::AddFrame(3, proto::AppendMeta::kAtEnd, 1, padded_rows::Columns(103, 1),
                                                  std::vector<double>{-1.0}));
  transport_->Push(kActor, AddFrame(4, 103, 1));
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 3).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Added(kActor, 4).first_key, 5u);
  EXPECT_EQ(replay_->stream_steps(kActor), 4);
  EXPECT_EQ(StoredId(5), 103);
}

// Rows below zero_copy_min_row_bytes are gathered into the reply; rows at
// least that long go from the ring.
TEST_F(TransitionServiceTest, SmallRowsAreGatheredAndLargeOnesSentFromTheRing) {
  const auto id_of = [](uint64_t key) { return static_cast<int64_t>(key); };
  Start(kRowBytes + 1);
  transport_->Push(kActor, AddFrame(1, 0, kRing));
  PushSample(2, 16);
  Step();
  Added(kActor, 1);
  CheckSample(2, 16, id_of);
  EXPECT_EQ(service_->counters().zero_copy_replies, 0);
  EXPECT_EQ(transport_->in_flight(), 0u);

  Start(kRowBytes);
  transport_->Push(kActor, AddFrame(1, 0, kRing));
  PushSample(2, 16);
  Step();
  Added(kActor, 1);
  EXPECT_EQ(service_->counters().zero_copy_replies, 1);
  ASSERT_EQ(transport_->in_flight(), 1u);
  ASSERT_TRUE(transport_->Deliver(kLearner));
  CheckSample(2, 16, id_of);
}

// A reply sent from the ring pins its rows' step slots: appends into the
// slack go, the one that would overwrite a pinned row waits until the reply
// is received, and the reply reads its rows as drawn.
TEST_F(TransitionServiceTest, RowsInFlightHoldTheAppendThatWouldOverwriteThem) {
  Start(0);
  ASSERT_EQ(replay_->steps().slack(), kRing);
  transport_->Push(kActor, AddFrame(1, 0, kRing));
  Step();
  Added(kActor, 1);
  PushSample(2, kRing);  // 8 strata over 8 equal leaves: every held row
  Step();
  ASSERT_EQ(transport_->in_flight(), 1u);
  transport_->Push(kActor, AddFrame(3, 8, kRing));  // into the slack: goes, and the table holds 8 .. 15
  transport_->Push(kActor, AddFrame(4, 16, 1));     // onto step slot 0: pinned
  Step();
  EXPECT_EQ(Added(kActor, 3).first_key, 8u);
  EXPECT_TRUE(transport_->outbox(kActor).empty());
  EXPECT_EQ(service_->held_adds(kActor), 1);
  EXPECT_EQ(service_->counters().pinned_adds, 1);
  ASSERT_TRUE(transport_->Deliver(kLearner));
  const std::vector<uint64_t> drawn = CheckSample(2, kRing, [](uint64_t key) { return static_cast<int64_t>(key); });
  EXPECT_EQ(std::set<uint64_t>(drawn.begin(), drawn.end()).size(), static_cast<size_t>(kRing));
  Step();
  EXPECT_EQ(Added(kActor, 4).first_key, 16u);
  EXPECT_EQ(StoredId(16), 16);
}

// Updates apply to held items; once the ring overwrites an item's step the
// item is gone with it (not by the table's remover: the table holds 8 items
// at most, and never more than 8 here), its key stale for updates and never
// drawn again.
TEST_F(TransitionServiceTest, ItemsLeaveWithTheirStepsAndTheirKeysAreStale) {
  Start(-1);
  transport_->Push(kActor, AddFrame(1, 0, kRing));
  Step();
  Added(kActor, 1);
  const auto update = [&](uint64_t request_id, std::vector<uint64_t> keys) {
    const std::vector<double> priorities(keys.size(), 4.0);
    transport_->Push(kLearner, Frame(MessageKind::kUpdateRequest, request_id,
                                     proto::UpdateRequest{static_cast<int64_t>(keys.size())},
                                     {std::as_bytes(std::span(keys)), std::as_bytes(std::span(priorities))}));
    Step();
    proto::UpdateReply updated;
    EXPECT_TRUE(proto::DecodeMeta(Reply(kLearner, MessageKind::kUpdateReply, request_id), &updated).ok());
    return updated;
  };
  proto::UpdateReply updated = update(2, {0, 5});
  EXPECT_EQ(updated.applied, 2);
  EXPECT_EQ(items().tree().Total(), 6.0 + 2 * 4.0);
  transport_->Push(kActor, AddFrame(3, 8, 4));  // steps 8 .. 11 push steps 0 .. 3 out of the ring
  Step();
  EXPECT_EQ(Added(kActor, 3).first_key, 8u);
  EXPECT_EQ(items().size(), kRing);
  for (uint64_t key = 0; key < 12; ++key) EXPECT_EQ(StoredId(key), key < 4 ? -1 : static_cast<int64_t>(key)) << key;
  // Keys 4, 6 and 7 at 1, key 5 at 4, the new keys at the running max, 4.
  EXPECT_EQ(items().tree().Total(), 3.0 + 4.0 + 4 * 4.0);
  updated = update(4, {0, 3, 5, 9});
  EXPECT_EQ(updated.applied, 2);
  EXPECT_EQ(updated.stale, 2);
  PushSample(5, 64);
  Step();
  for (const uint64_t key : CheckSample(5, 64, [](uint64_t key) { return static_cast<int64_t>(key); })) {
    EXPECT_GE(key, 4u) << "an item whose step the ring overwrote was drawn";
  }
}

}  // namespace
}  // namespace perserve::service
