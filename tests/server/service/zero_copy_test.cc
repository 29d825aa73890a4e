// The data path without copies in the server. Sample replies sent from the
// store (ServiceOptions::zero_copy_min_row_bytes): over a LoopbackTransport
// that, like MPI, reads a reply's rows only when the learner receives it.
// What a sample sees: the rows of its keys as they were when it was drawn,
// whole, however many adds come meanwhile; an add that would overwrite rows
// of a reply still in flight waits until it is received. And adds whose
// columns come apart (AddRequest::columns_follow), received into the store:
// in order, held while they have not come, dropped when the add is refused,
// never written over live items when wrong.
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>

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
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_id, int64_t count, double timeout_seconds = 0.0) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> pads;
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(first_id + i);
    for (int64_t j = 0; j < kPad; ++j) pads.push_back(PadByte(first_id + i, j));
  }
  return Frame(MessageKind::kAddRequest, request_id, proto::AddRequest{count, false, timeout_seconds},
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
  PushAdds(0, 8, 1);  // fills the ring: ids 0..63 in slots 0..63
  Steps(2);
  ASSERT_EQ(Acknowledged(), 8);
  transport_->outbox(kActor).clear();

  // Two samples in flight, unread: their rows stay where they are in the store.
  PushSample(100, 64);
  PushSample(101, 64);
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
  PushSample(102, 64);
  Step();
  ASSERT_TRUE(transport_->Deliver(kLearner));
  for (uint64_t key : CheckSample(102, 64)) EXPECT_GE(key, 64u);
}

TEST_F(ZeroCopyTest, RowsNextInLineAreCopiedSoTheNextAddsNeverWait) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  PushSample(100, 64);
  Step();
  // The next capacity / 8 slots were copied into the reply: an add of them goes through.
  PushAdds(64, 1, 10);
  Step();
  EXPECT_EQ(Acknowledged(), 1);
  EXPECT_EQ(service_->counters().pinned_adds, 0);
  ASSERT_TRUE(transport_->Deliver(kLearner));
  CheckSample(100, 64);  // ids 0..7 as drawn, though slots 0..7 now hold 64..71
}

// Issue 24's finding 7: an add past its timeout says what held it (here the
// rows of a reply in flight; it always blamed the rate limiter).
TEST_F(ZeroCopyTest, AnAddPastItsTimeoutSaysTheRowsInFlightHeldIt) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  PushSample(100, 64);
  Step();
  transport_->Push(kActor, AddFrame(10, 64, 8));  // onto slots 0..7, copied into the reply: goes
  transport_->Push(kActor, AddFrame(11, 72, 8, /*timeout_seconds=*/0.02));  // onto pinned slots 8..15
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
}

// Issue 24's finding 2: a prefetched request's reply may stay unread while
// the learner waits for the actors (a barrier); its rows pinned in the store
// held their adds for ever. They are copied: a whole ring of adds goes
// through, and the replies still hold the rows as drawn.
TEST_F(ZeroCopyTest, APrefetchedReplysRowsAreCopiedSoNoAddWaitsForThem) {
  PushAdds(0, 8, 1);
  Steps(2);
  transport_->outbox(kActor).clear();
  PushSample(100, 64, /*awaited=*/false);
  PushSample(101, 64, /*awaited=*/false);
  Step();
  PushAdds(64, 8, 10);
  Steps(4);
  EXPECT_EQ(Acknowledged(), 8) << "no add waits for the unread replies";
  EXPECT_EQ(service_->counters().pinned_adds, 0);
  EXPECT_EQ(service_->counters().zero_copy_replies, 0);
  while (transport_->Deliver(kLearner)) {
  }
  for (uint64_t key : CheckSample(100, 64)) EXPECT_LT(key, 64u);
  for (uint64_t key : CheckSample(101, 64)) EXPECT_LT(key, 64u);
}

// Adds whose columns come in a message of their own.
class ColumnsApartTest : public service_test::ServiceFixture {
 protected:
  void SetUp() override {
    Start(2, kCapacity, RowSchema(), Options(1), {ClientRole::kActor, ClientRole::kLearner});
  }

  // The request of an add of ids first_id.. with columns_follow (its bulk:
  // the priorities), and the columns message (of `send_items` items' bytes).
  void PushApart(uint64_t request_id, int64_t first_id, int64_t count, double priority = 1.0,
                 bool with_columns = true, int64_t send_items = -1) {
    const std::vector<double> priorities(static_cast<size_t>(count), priority);
    proto::AddRequest request{count, true};
    request.columns_follow = true;
    transport_->Push(kActor, Frame(MessageKind::kAddRequest, request_id, request,
                                   {std::as_bytes(std::span(priorities))}));
    if (with_columns) PushColumns(first_id, send_items < 0 ? count : send_items);
  }
  void PushColumns(int64_t first_id, int64_t count) {
    const std::vector<std::byte> frame = AddFrame(0, first_id, count);
    proto::Frame decoded;
    ASSERT_TRUE(proto::DecodeFrame(frame, &decoded).ok());
    transport_->Push(kActor, {decoded.bulk.begin(), decoded.bulk.end()}, proto::kAddColumnsTag);
  }

  // The ids a sample of every slot finds under keys first_key.. (the
  // replay's items, read back through the store).
  std::map<uint64_t, int64_t> Held(uint64_t request_id) {
    transport_->Push(kLearner, Frame(MessageKind::kSampleRequest, request_id, proto::SampleRequest{512, 0.5}));
    Step();
    const proto::Frame reply = Reply(kLearner, MessageKind::kSampleReply, request_id);
    std::map<uint64_t, int64_t> ids;
    for (int64_t i = 0; i < 512; ++i) {
      uint64_t key = 0;
      int64_t id = 0;
      std::memcpy(&key, reply.bulk.data() + 8 * i, 8);
      std::memcpy(&id, reply.bulk.data() + 512 * 24 + 8 * i, 8);
      ids[key] = id;
      for (int64_t j = 0; j < kPad; ++j) {
        EXPECT_EQ(static_cast<uint8_t>(reply.bulk[512 * 32 + i * kPad + j]), PadByte(id, j)) << "id " << id;
      }
    }
    return ids;
  }
  // Every item a sample draws holds the id it was added with (here each key is its id).
  void ExpectEachKeyHoldsItsId(uint64_t request_id, const std::string& why = "") {
    for (const auto& [key, id] : Held(request_id)) EXPECT_EQ(static_cast<int64_t>(key), id) << why;
  }

  proto::AddReply Added(uint64_t request_id) {
    proto::AddReply added;
    EXPECT_TRUE(proto::DecodeMeta(Reply(kActor, MessageKind::kAddReply, request_id), &added).ok());
    return added;
  }
};

// Adds apart that the rate limiter holds (R 1, E 4, M 8: once the first 8
// items are in, each add of 8 waits for samples), one message a pass, so
// their columns wait in the transport meanwhile; closing the learner lets
// them go.
class HeldColumnsApartTest : public ColumnsApartTest {
 protected:
  void SetUp() override {
    ServiceOptions options = Options(8);
    options.samples_per_insert = 1.0;
    options.error_buffer = 4.0;
    options.messages_per_client_pass = 1;
    Start(2, kCapacity, RowSchema(), options, {ClientRole::kActor, ClientRole::kLearner});
    transport_->Push(kActor, AddFrame(100, 0, 8));
    Step();
    Added(100);
  }

  // Closes the learner, so the held adds 1 and 2 (ids 8.. and 16..) go: each
  // is stored under its keys, read from the store.
  void ReleaseAndCheckTheHeldAdds() {
    transport_->Push(kLearner, Frame(MessageKind::kCloseRequest, 200, proto::Empty{}));
    Step();
    Reply(kLearner, MessageKind::kCloseReply, 200);
    EXPECT_EQ(Added(1).first_key, 8u);
    EXPECT_EQ(Added(2).first_key, 16u);
    for (int64_t key = 0; key < 24; ++key) {
      int64_t id = -1;
      std::memcpy(&id, replay_->store().Rows(0, key % kCapacity, 1).data(), sizeof(id));
      EXPECT_EQ(id, key) << "key " << key << " holds another add's row";
    }
  }
};

// Issue 24, defect 1: the stats line described the oldest held add by a
// matched probe, which claimed its columns; the loop's next receive then took
// the second add's columns and gave them to the first.
TEST_F(HeldColumnsApartTest, TheStatsLineLeavesEachHeldAddItsOwnColumns) {
  PushApart(1, 8, 8);
  Step();
  EXPECT_EQ(service_->held_adds(kActor), 1);
  const std::string stats = service_->DescribeClients();
  EXPECT_NE(stats.find("held adds 1"), std::string::npos) << stats;
  EXPECT_EQ(transport_->claimed(kActor), 0u) << "describing an add took its columns";
  PushApart(2, 16, 8);
  for (int pass = 0; pass < 4; ++pass) {
    Step();
    (void)service_->DescribeClients();
  }
  EXPECT_EQ(transport_->waiting(kActor), 0u);
  ReleaseAndCheckTheHeldAdds();
}

// Columns that come after a later add's request go to the held adds in their
// order (the oldest waiting first, not the newest).
TEST_F(HeldColumnsApartTest, ColumnsAfterTwoHeldAddsGoToTheOldestFirst) {
  PushApart(1, 8, 8, 1.0, /*with_columns=*/false);
  PushApart(2, 16, 8, 1.0, /*with_columns=*/false);
  PushColumns(8, 8);
  PushColumns(16, 8);
  for (int pass = 0; pass < 4; ++pass) Step();
  EXPECT_EQ(service_->held_adds(kActor), 2);
  EXPECT_EQ(transport_->waiting(kActor), 0u) << "the loop took both columns messages";
  ReleaseAndCheckTheHeldAdds();
}

TEST_F(ColumnsApartTest, ColumnsGoStraightIntoTheStoreAcrossTheRingsEnd) {
  PushApart(1, 0, 40);
  PushApart(2, 40, 40);  // slots 40..63, then 0..15
  Step();
  EXPECT_EQ(Added(1).first_key, 0u);
  EXPECT_EQ(Added(2).first_key, 40u);
  EXPECT_EQ(transport_->waiting(kActor), 0u);
  ExpectEachKeyHoldsItsId(3);
}

TEST_F(ColumnsApartTest, AnAddWaitsForItsColumnsAndTheClientsLaterAddsWaitBehindIt) {
  PushApart(1, 0, 8, 1.0, /*with_columns=*/false);
  Step();
  EXPECT_TRUE(transport_->outbox(kActor).empty());
  EXPECT_NE(service_->DescribeClients().find("waits for its columns"), std::string::npos)
      << service_->DescribeClients();
  transport_->Push(kActor, AddFrame(2, 8, 8));  // in one message, but after the add still waiting
  Step();
  EXPECT_TRUE(transport_->outbox(kActor).empty());
  PushColumns(0, 8);
  Step();
  EXPECT_EQ(Added(1).first_key, 0u);
  EXPECT_EQ(Added(2).first_key, 8u);
  ExpectEachKeyHoldsItsId(3);
}

TEST_F(ColumnsApartTest, AClientsCloseWaitsBehindAnAddWaitingForItsColumnsAndASecondIsRefused) {
  PushApart(1, 0, 8, 1.0, /*with_columns=*/false);
  transport_->Push(kActor, Frame(MessageKind::kCloseRequest, 2, proto::Empty{}));
  transport_->Push(kActor, Frame(MessageKind::kCloseRequest, 3, proto::Empty{}));
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 3).code(), Status::Code::kFailedPrecondition) << "the first close waits already";
  EXPECT_TRUE(transport_->outbox(kActor).empty());
  PushColumns(0, 8);
  Step();
  EXPECT_EQ(Added(1).first_key, 0u);
  Reply(kActor, MessageKind::kCloseReply, 2);
}

// Issue 24, found by the simulation (seed 3): an add apart refused on
// arrival (here one more than --max-deferred-adds; a bad count does the
// same) while an earlier add apart of its client waits for its columns
// marked "the next columns to come" for dropping, but the earlier add's come
// first: they were dropped, and the held add took the refused add's, of the
// same size here: stored under the wrong keys. HeldAdds keeps the columns
// each client owes in one ledger, in its order.
TEST_F(ColumnsApartTest, ARefusedAddApartDropsItsOwnColumnsNotAnEarlierHeldAdds) {
  ServiceOptions options = Options(1);
  options.max_deferred_adds = 1;
  Start(2, kCapacity, RowSchema(), options, {ClientRole::kActor, ClientRole::kLearner});
  PushApart(1, 0, 8, 1.0, /*with_columns=*/false);    // held: waits for its columns
  PushApart(2, 100, 8, 1.0, /*with_columns=*/false);  // one add held already: refused
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 2).code(), Status::Code::kResourceExhausted);
  PushColumns(0, 8);    // add 1's
  PushColumns(100, 8);  // the refused add 2's: to be dropped
  Step();
  Step();
  EXPECT_EQ(Added(1).first_key, 0u);
  EXPECT_EQ(transport_->waiting(kActor), 0u);
  ExpectEachKeyHoldsItsId(3, "an item holds the refused add's row");
}

TEST_F(ColumnsApartTest, ColumnsOfAnotherSizeAreDroppedAndNothingLiveIsOverwritten) {
  PushApart(1, 0, 32);
  PushApart(2, 32, 32);
  Step();
  Added(1);
  Added(2);
  PushApart(3, 1000, 8, 1.0, true, /*send_items=*/7);  // one item short
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 3).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(transport_->waiting(kActor), 0u) << "the wrong columns were received and dropped";
  ExpectEachKeyHoldsItsId(4, "an item was overwritten");
  PushApart(5, 64, 8);
  Step();
  EXPECT_EQ(Added(5).first_key, 64u);
}

TEST_F(ColumnsApartTest, AnAddRefusedOnceItsColumnsCameLeavesNothingBehind) {
  PushApart(1, 1000, 8, std::nan(""), /*with_columns=*/false);
  Step();
  EXPECT_TRUE(transport_->outbox(kActor).empty()) << "it waits for its columns";
  PushColumns(1000, 8);
  PushApart(2, 0, 8);
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Added(2).first_key, 0u);
  EXPECT_EQ(transport_->waiting(kActor), 0u);
  ExpectEachKeyHoldsItsId(3, "the refused add's columns were stored");
}

TEST_F(ColumnsApartTest, ARefusedAddsColumnsAreDroppedWhenTheyComeLater) {
  proto::AddRequest request{8, false, /*timeout_seconds=*/0.001};
  request.columns_follow = true;
  transport_->Push(kActor, Frame(MessageKind::kAddRequest, 1, request));
  Step();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 1).code(), Status::Code::kDeadlineExceeded) << "no columns came in time";
  PushColumns(1000, 8);  // the refused add's columns, late
  PushApart(2, 0, 8);
  Step();
  Step();
  EXPECT_EQ(Added(2).first_key, 0u);
  EXPECT_EQ(transport_->waiting(kActor), 0u);
  EXPECT_TRUE(transport_->outbox(kActor).empty()) << "the late columns were dropped without a word";
  ExpectEachKeyHoldsItsId(3, "the refused add's columns were stored");
}

TEST_F(ColumnsApartTest, ColumnsNoAddWaitsForAreDroppedAndCounted) {
  PushColumns(0, 8);
  Step();
  EXPECT_TRUE(transport_->outbox(kActor).empty()) << "no request id to answer";
  EXPECT_EQ(service_->counters().errors, 1);
  EXPECT_EQ(replay_->size(), 0);
  PushApart(1, 0, 8);
  Step();
  EXPECT_EQ(Added(1).first_key, 0u);
}

TEST_F(ColumnsApartTest, ARequestWithColumnsApartThatAlsoCarriesThemIsRefused) {
  std::vector<std::byte> frame = AddFrame(1, 0, 8);
  proto::Frame decoded;
  ASSERT_TRUE(proto::DecodeFrame(frame, &decoded).ok());
  proto::AddRequest request{8, false};
  request.columns_follow = true;
  transport_->Push(kActor, Frame(MessageKind::kAddRequest, 1, request, {decoded.bulk}));
  PushColumns(0, 8);
  Step();
  EXPECT_EQ(ErrorStatus(kActor, 1).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(transport_->waiting(kActor), 0u);
  EXPECT_EQ(replay_->size(), 0);
}

}  // namespace
}  // namespace perserve::service
