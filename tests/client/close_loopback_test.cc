// The client library without MPI (issue 19): ActorClient and LearnerClient
// over a Connection that hands each frame straight to a ReplayService on a
// LoopbackTransport, stepping the service while it waits for a reply. The
// client's own logic (batches in flight, reply matching, Close) is the real
// one; only the transport is swapped.
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/connection.h"
#include "perserve/client.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/replay/step_test_util.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"

namespace perserve::client_internal {

struct TestAccess {
  static std::unique_ptr<ActorClient> Actor(std::unique_ptr<Connection> connection, ClientOptions options) {
    return std::unique_ptr<ActorClient>(new ActorClient(std::move(connection), options));
  }
};

namespace {

// One client (index 0) of a service that runs in this thread: Send queues the
// frame, and each receive steps the service once before looking for replies.
class LoopbackConnection final : public Connection {
 public:
  LoopbackConnection(service::LoopbackTransport* transport, service::ReplayService* service, Schema schema)
      : transport_(transport), service_(service), schema_(std::move(schema)) {}

  const Schema& schema() const override { return schema_; }
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) override {
    std::vector<std::byte> buffer;
    buffer.reserve(expected_bytes);
    return buffer;
  }
  Status Send(std::vector<std::byte> frame) override {
    transport_->Push(0, std::move(frame));
    return Status::Ok();
  }
  Status Peers(MPI_Comm*) const override { return Status::Unimplemented("no peers over the loopback"); }

 protected:
  Status ReceiveReply(bool wait, std::vector<std::byte>* message, size_t* length, bool* received) override {
    for (int step = 0; step < 1000; ++step) {
      bool handled = false;
      PERSERVE_RETURN_IF_ERROR(service_->Step(&handled));
      *received = !transport_->outbox(0).empty();
      if (*received) {
        *message = std::move(transport_->outbox(0).front());
        *length = message->size();
        transport_->outbox(0).pop_front();
        return Status::Ok();
      }
      if (!wait) return Status::Ok();
    }
    return Status::Internal("no reply after 1000 service steps");
  }
  Status ProgressSends() override { return Status::Ok(); }
  Status DrainSends() override { return Status::Ok(); }

 private:
  service::LoopbackTransport* transport_;
  service::ReplayService* service_;
  Schema schema_;
};

class ClientLoopbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = Schema{{{"id", DType::kInt64, {}}}};
    replay::step_test::StepFixture fixture;
    ASSERT_TRUE(replay::step_test::MakeTransitionReplay(schema_, 64, 1, &fixture, 1.0, 5).ok());
    replay_ = std::move(fixture.steps);
    transport_ = std::make_unique<service::LoopbackTransport>(1);
    service_ = std::make_unique<service::ReplayService>(replay_.get(), transport_.get(),
                                                        service::ServiceOptions{1, 0.0});
  }

  std::unique_ptr<ActorClient> Actor(int max_in_flight) {
    ClientOptions options;
    options.max_in_flight = max_in_flight;
    return TestAccess::Actor(std::make_unique<LoopbackConnection>(transport_.get(), service_.get(), schema_),
                             options);
  }

  Schema schema_;
  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<service::LoopbackTransport> transport_;
  std::unique_ptr<service::ReplayService> service_;
};

// Close() without a Flush() first: every batch still in flight is stored and
// acknowledged before the close, and the service sees the client closed.
TEST_F(ClientLoopbackTest, CloseDeliversEveryBatchInFlightWithoutAFlush) {
  std::unique_ptr<ActorClient> actor = Actor(8);
  std::vector<int64_t> ids(10);
  for (int batch = 0; batch < 5; ++batch) {
    for (int64_t j = 0; j < 10; ++j) ids[j] = 10 * batch + j;
    ASSERT_TRUE(actor->Add(BatchView{10, {ids.data()}}).ok());
  }
  EXPECT_EQ(actor->items_acknowledged(), 0) << "with 8 in flight, no Add had to wait";
  ASSERT_TRUE(actor->Close().ok());
  EXPECT_EQ(actor->items_acknowledged(), 50);
  EXPECT_EQ(actor->last_first_key(), 40u);
  EXPECT_EQ(replay_->items().size(), 50);
  EXPECT_TRUE(service_->done());
  EXPECT_TRUE(actor->Close().ok()) << "Close is idempotent";
}

// A batch the server rejects while in flight is reported by Close, which
// still closes.
TEST_F(ClientLoopbackTest, CloseReportsARejectionStillInFlight) {
  std::unique_ptr<ActorClient> actor = Actor(8);
  std::vector<int64_t> many(65, 1), few(3, 2);
  ASSERT_TRUE(actor->Add(BatchView{3, {few.data()}}).ok());
  ASSERT_TRUE(actor->Add(BatchView{65, {many.data()}}).ok());  // over the capacity of 64: only the server knows
  ASSERT_TRUE(actor->Add(BatchView{3, {few.data()}}).ok());
  const Status closed = actor->Close();
  EXPECT_EQ(closed.code(), Status::Code::kInvalidArgument) << closed.ToString();
  EXPECT_NE(closed.message().find("an earlier batch was rejected"), std::string::npos) << closed.ToString();
  EXPECT_EQ(actor->rejected_batches(), 1);
  EXPECT_EQ(actor->items_acknowledged(), 6);
  EXPECT_EQ(replay_->items().size(), 6);
  EXPECT_TRUE(service_->done()) << "the close went out despite the rejection";
}

}  // namespace
}  // namespace perserve::client_internal
