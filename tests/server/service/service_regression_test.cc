// Service-loop defects that once slipped through the rest of the suite (issue
// 19), each pinned by a direct test over the loopback transport: the pass
// order across passes, a close that arrives behind its client's adds, and the
// rows a sample reply carries after the ring wraps.
#include <cstring>
#include <map>
#include <set>

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

uint8_t Tag(int64_t id, int b) { return static_cast<uint8_t>(b == 0 ? id * 3 + 1 : 200 - id); }

// An add of items numbered first_item, first_item + 1, ..., without
// priorities: transitions at the end of the sender's stream.
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_item, int64_t count) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> tags;
  for (int64_t id = first_item; id < first_item + count; ++id) {
    ids.push_back(id);
    tags.push_back(Tag(id, 0));
    tags.push_back(Tag(id, 1));
  }
  std::vector<std::byte> columns;
  const auto id_bytes = std::as_bytes(std::span(ids));
  const auto tag_bytes = std::as_bytes(std::span(tags));
  columns.insert(columns.end(), id_bytes.begin(), id_bytes.end());
  columns.insert(columns.end(), tag_bytes.begin(), tag_bytes.end());
  return service_test::AddFrame(request_id, proto::AppendMeta::kAtEnd, count, columns);
}


class ServiceRegressionTest : public ::testing::Test {
 protected:
  void Start(int clients, int64_t capacity, int messages_per_client_pass) {
    transport_ = std::make_unique<LoopbackTransport>(clients);
    replay::step_test::StepFixture fixture;
    const Status created = replay::step_test::MakeTransitionReplay(IdSchema(), capacity, clients, &fixture, 1.0, 5);
    ASSERT_TRUE(created.ok()) << created.ToString();
    replay_ = std::move(fixture.steps);
    ServiceOptions options{1, 0.0};
    options.messages_per_client_pass = messages_per_client_pass;
    service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
  }

  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }

  // Pops client's oldest reply; checks its kind and request id.
  proto::Frame Reply(int client, MessageKind kind, uint64_t request_id) {
    return service_test::PopReply(*transport_, client, kind, request_id, kept_);
  }

  proto::AddReply AddReply(int client, uint64_t request_id) {
    proto::AddReply reply{};
    EXPECT_TRUE(proto::DecodeMeta(Reply(client, MessageKind::kAddReply, request_id), &reply).ok());
    return reply;
  }

  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<ReplayService> service_;
  std::deque<std::vector<std::byte>> kept_;  // the replies' bytes, which decoded frames point into
};

// The defect: the pass's starting client never advancing, so client 0 was
// always served first. Each pass here has one add from every client; the keys
// the adds get give the order they were handled in: pass p starts at client
// p mod 3 and goes round from there.
TEST_F(ServiceRegressionTest, EachPassStartsOneClientFurtherOn) {
  const int clients = 3;
  Start(clients, 64, 4);
  for (int pass = 0; pass < 2 * clients; ++pass) {
    for (int client = 0; client < clients; ++client) {
      transport_->Push(client, AddFrame(static_cast<uint64_t>(pass), 10 * pass + client, 1));
    }
    Step();
    const uint64_t pass_first_key = static_cast<uint64_t>(clients * pass);
    for (int client = 0; client < clients; ++client) {
      const uint64_t position = static_cast<uint64_t>((client - pass % clients + clients) % clients);
      EXPECT_EQ(AddReply(client, static_cast<uint64_t>(pass)).first_key, pass_first_key + position)
          << "pass " << pass << " should start at client " << pass % clients << "; client " << client
          << " should come " << position << " after it";
    }
  }
}

// Close without MPI: each actor queues its adds and then its close, all at
// once (as a client that does not wait for acknowledgements sends them), and
// one client closes at once with nothing sent. One message per pass, so the
// closes arrive in passes while other clients still have adds queued. Every
// add is stored, each actor sees every add acknowledged before its close
// reply, and every stored row is one an actor sent.
TEST_F(ServiceRegressionTest, EveryAddQueuedBeforeACloseIsStoredAndAcknowledgedFirst) {
  const int clients = 3;
  Start(clients, 256, 1);
  const std::map<int, std::vector<int64_t>> batches = {{0, {3, 1, 4, 1, 5}}, {2, {9, 2, 6}}};
  int64_t next_item = 0;
  std::map<int, int64_t> first_item;
  for (const auto& [client, counts] : batches) {
    first_item[client] = next_item;
    for (size_t b = 0; b < counts.size(); ++b) {
      transport_->Push(client, AddFrame(b + 1, next_item, counts[b]));
      next_item += counts[b];
    }
    transport_->Push(client, Frame(MessageKind::kCloseRequest, 100, proto::Empty{}));
  }
  transport_->Push(1, Frame(MessageKind::kCloseRequest, 100, proto::Empty{}));  // closes in the first pass
  ASSERT_TRUE(service_->Run().ok());
  EXPECT_TRUE(service_->done());

  for (const auto& [client, counts] : batches) {
    for (size_t b = 0; b < counts.size(); ++b) {
      EXPECT_EQ(AddReply(client, b + 1).count, counts[b]) << "client " << client << ", batch " << b;
    }
    Reply(client, MessageKind::kCloseReply, 100);
    EXPECT_TRUE(transport_->outbox(client).empty()) << "client " << client << ": replies after the close reply";
  }
  Reply(1, MessageKind::kCloseReply, 100);
  ASSERT_EQ(replay_->items().next_key(), static_cast<uint64_t>(next_item)) << "items lost at close";
  ASSERT_EQ(replay_->items().size(), next_item);
  // Each item's row is its step's, in the ring.
  std::vector<int64_t> item_slots(static_cast<size_t>(next_item)), slots;
  for (int64_t key = 0; key < next_item; ++key) item_slots[key] = replay_->items().SlotOf(static_cast<uint64_t>(key));
  replay_->StepSlots(item_slots, &slots);
  const store::TransitionStore& ring = replay_->steps().columns();
  std::vector<std::byte> rows(static_cast<size_t>(next_item * ring.schema().ItemBytes()));
  ring.Gather(slots, rows);
  std::set<int64_t> stored;
  for (int64_t s = 0; s < next_item; ++s) {
    int64_t id = -1;
    std::memcpy(&id, rows.data() + 8 * s, 8);
    stored.insert(id);
  }
  EXPECT_EQ(stored.size(), static_cast<size_t>(next_item));
  EXPECT_EQ(*stored.begin(), 0);
  EXPECT_EQ(*stored.rbegin(), next_item - 1);
}

// A sample reply after the ring wraps (capacity 4, 7 items; the second add
// wraps inside the batch): every key in it is held, and the rows the reply
// carries for it, both columns, are the ones added for that key.
TEST_F(ServiceRegressionTest, ASampleReplyAfterTheRingWrapsCarriesEachKeysOwnRow) {
  Start(2, 4, 4);
  transport_->Push(0, AddFrame(1, 0, 3));
  transport_->Push(0, AddFrame(2, 3, 4));
  Step();
  EXPECT_EQ(AddReply(0, 1).first_key, 0u);
  EXPECT_EQ(AddReply(0, 2).first_key, 3u);
  std::set<uint64_t> drawn;
  const int64_t batch = 16;
  for (uint64_t request = 10; request < 18; ++request) {
    transport_->Push(1, Frame(MessageKind::kSampleRequest, request, proto::SampleRequest{batch, 0.5}));
    Step();
    const proto::Frame reply = Reply(1, MessageKind::kSampleReply, request);
    // The bulk: keys, weights, probabilities (8 bytes each), then the id column, then the tag column.
    ASSERT_EQ(reply.bulk.size(), static_cast<size_t>(batch * (3 * 8 + 8 + 2)));
    const std::byte* ids = reply.bulk.data() + 24 * batch;
    const std::byte* tags = ids + 8 * batch;
    for (int64_t i = 0; i < batch; ++i) {
      uint64_t key = 0;
      int64_t id = -1;
      std::memcpy(&key, reply.bulk.data() + 8 * i, 8);
      std::memcpy(&id, ids + 8 * i, 8);
      ASSERT_GE(key, 3u);
      ASSERT_LT(key, 7u);
      EXPECT_EQ(id, static_cast<int64_t>(key));
      EXPECT_EQ(static_cast<uint8_t>(tags[2 * i]), Tag(static_cast<int64_t>(key), 0)) << "key " << key;
      EXPECT_EQ(static_cast<uint8_t>(tags[2 * i + 1]), Tag(static_cast<int64_t>(key), 1)) << "key " << key;
      drawn.insert(key);
    }
  }
  EXPECT_EQ(drawn.size(), 4u) << "a held key never drawn";
}

}  // namespace
}  // namespace perserve::service
