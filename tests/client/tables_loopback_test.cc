// The clients' tables (issue 34, protocol 9) without MPI: the real
// ActorClient and LearnerClient over a loopback Connection into a one-table
// ReplayService (client 0 the actor, client 1 the learner). The connection
// can claim more tables than the service has, so what the clients check
// themselves (unknown names, updates to a table without priorities, a table
// named twice) is seen refused before anything is sent, and what they send
// for another table is seen on the wire (and refused by this server).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/connection.h"
#include "perserve/client.h"
#include "proto/append.h"
#include "proto/codec.h"
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
  static std::unique_ptr<LearnerClient> Learner(std::unique_ptr<Connection> connection, ClientOptions options) {
    return std::unique_ptr<LearnerClient>(new LearnerClient(std::move(connection), options));
  }
};

namespace {

constexpr int kActor = 0;
constexpr int kLearner = 1;

// Client `client` of the service, which it steps while it waits; its tables
// are `tables` (empty: the Connection's default, one table), and every frame
// it sends is kept in `sent`.
class TablesConnection final : public Connection {
 public:
  TablesConnection(service::LoopbackTransport* transport, service::ReplayService* service, int client, Schema schema,
                   std::vector<proto::TableSchemas> tables, std::vector<std::vector<std::byte>>* sent)
      : transport_(transport),
        service_(service),
        client_(client),
        schema_(std::move(schema)),
        tables_(std::move(tables)),
        sent_(sent) {}

  const Schema& schema() const override { return schema_; }
  const std::vector<proto::TableSchemas>& tables() const override {
    return tables_.empty() ? Connection::tables() : tables_;
  }
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) override {
    std::vector<std::byte> buffer;
    buffer.reserve(expected_bytes);
    return buffer;
  }
  Status Send(std::vector<std::byte> frame) override {
    sent_->push_back(frame);
    transport_->Push(client_, std::move(frame));
    return Status::Ok();
  }
  Status Peers(MPI_Comm*) const override { return Status::Unimplemented("no peers over the loopback"); }

 protected:
  Status ReceiveReply(bool wait, std::vector<std::byte>* message, size_t* length, bool* received) override {
    for (int step = 0; step < 1000; ++step) {
      bool handled = false;
      PERSERVE_RETURN_IF_ERROR(service_->Step(&handled));
      *received = !transport_->outbox(client_).empty();
      if (*received) {
        *message = std::move(transport_->outbox(client_).front());
        *length = message->size();
        transport_->outbox(client_).pop_front();
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
  int client_;
  Schema schema_;
  std::vector<proto::TableSchemas> tables_;
  std::vector<std::vector<std::byte>>* sent_;
};

class TablesLoopbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = Schema{{{"id", DType::kInt64, {}}}};
    replay::step_test::StepFixture fixture;
    ASSERT_TRUE(replay::step_test::MakeTransitionReplay(schema_, 256, 2, &fixture, 1.0, 5).ok());
    replay_ = std::move(fixture.steps);
    transport_ = std::make_unique<service::LoopbackTransport>(2);
    transport_->SetRole(kActor, service::ClientRole::kActor);
    transport_->SetRole(kLearner, service::ClientRole::kLearner);
    service::ServiceOptions options;
    options.stats_interval_seconds = 0.0;
    service_ = std::make_unique<service::ReplayService>(replay_.get(), transport_.get(), options);
  }

  // The server's one table ("default", prioritized), then what the clients are told besides.
  std::vector<proto::TableSchemas> Tables(std::vector<proto::TableSchemas> more) const {
    std::vector<proto::TableSchemas> tables = {proto::TableSchemas{"default", false, schema_, {}}};
    tables.insert(tables.end(), more.begin(), more.end());
    return tables;
  }
  proto::TableSchemas Uniform() const { return proto::TableSchemas{"eval", false, schema_, {}, "uniform", false}; }
  proto::TableSchemas Heap() const { return proto::TableSchemas{"heap", false, schema_, {}, "max_heap", true}; }

  std::unique_ptr<ActorClient> Actor(std::vector<proto::TableSchemas> tables = {}) {
    return TestAccess::Actor(std::make_unique<TablesConnection>(transport_.get(), service_.get(), kActor, schema_,
                                                                std::move(tables), &actor_sent_),
                             ClientOptions{});
  }
  std::unique_ptr<LearnerClient> Learner(std::vector<proto::TableSchemas> tables = {}, int prefetch = 0) {
    ClientOptions options;
    options.prefetch = prefetch;
    return TestAccess::Learner(std::make_unique<TablesConnection>(transport_.get(), service_.get(), kLearner,
                                                                  schema_, std::move(tables), &learner_sent_),
                               options);
  }

  // `count` transitions numbered from `first` into the default table, acknowledged.
  void AddTransitions(ActorClient* actor, int64_t first, int64_t count) {
    std::vector<int64_t> ids(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) ids[static_cast<size_t>(j)] = first + j;
    ASSERT_TRUE(actor->Add(BatchView{count, {ids.data()}}).ok());
    ASSERT_TRUE(actor->Flush().ok());
  }

  // The table each sample request the learner sent named, in order.
  std::vector<int32_t> SampledTables() const {
    std::vector<int32_t> tables;
    for (const std::vector<std::byte>& bytes : learner_sent_) {
      proto::Frame frame;
      proto::SampleRequest request;
      if (proto::DecodeFrame(bytes, &frame).ok() && frame.kind() == proto::MessageKind::kSampleRequest &&
          proto::DecodeMeta(frame, &request).ok()) {
        tables.push_back(request.table);
      }
    }
    return tables;
  }

  Schema schema_;
  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<service::LoopbackTransport> transport_;
  std::unique_ptr<service::ReplayService> service_;
  std::vector<std::vector<std::byte>> actor_sent_, learner_sent_;
};

// A one-table server's table is "default": by name it is what every call
// without a table does, and a sample says it came from it.
TEST_F(TablesLoopbackTest, TheDefaultTableByNameIsTheServersOneTable) {
  std::unique_ptr<ActorClient> actor = Actor();
  std::unique_ptr<LearnerClient> learner = Learner();
  EXPECT_EQ(actor->tables(), std::vector<std::string>{"default"});
  EXPECT_EQ(learner->tables(), std::vector<std::string>{"default"});
  EXPECT_EQ(learner->schema("default").ToString(), schema_.ToString());
  EXPECT_TRUE(learner->schema("nope").columns.empty());
  std::vector<int64_t> ids = {7, 8, 9};
  ASSERT_TRUE(actor->Add(BatchView{3, {ids.data()}}, {}, "default").ok());
  ASSERT_TRUE(actor->Flush().ok());
  AddTransitions(actor.get(), 10, 5);

  SampleBatch batch;
  const Status sampled = learner->Sample("default", 16, 0.4, &batch);
  ASSERT_TRUE(sampled.ok()) << sampled.ToString();
  EXPECT_EQ(batch.table, "default");
  EXPECT_EQ(batch.size, 16);
  ASSERT_TRUE(learner->Sample(4, 0.4, &batch).ok());
  EXPECT_EQ(batch.table, "default");
  ReplayInfo info;
  ASSERT_TRUE(learner->Info("default", &info).ok());
  EXPECT_EQ(info.size, 8);
  UpdateResult result;
  const std::vector<double> priorities(batch.keys.size(), 2.0);
  ASSERT_TRUE(learner->UpdatePriorities("default", batch.keys, priorities, &result).ok());
  EXPECT_EQ(result.applied, 4);
  ASSERT_TRUE(learner->SendPriorityUpdate("default", batch.keys, priorities).ok());
  ASSERT_TRUE(learner->Flush().ok());
  EXPECT_EQ(SampledTables(), (std::vector<int32_t>{0, 0}));
  ASSERT_TRUE(actor->Close().ok());
  ASSERT_TRUE(learner->Close().ok());
}

// A name the server does not serve is refused by the client, naming it and
// the server's tables, and nothing is sent: samples, requests, info, updates,
// adds and appends.
TEST_F(TablesLoopbackTest, AnUnknownTableIsRefusedBeforeAnythingIsSent) {
  std::unique_ptr<ActorClient> actor = Actor(Tables({Uniform()}));
  std::unique_ptr<LearnerClient> learner = Learner(Tables({Uniform()}));
  const auto refused = [](const Status& status) {
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(status.message().find("no table \"r2d2\": the server's tables are \"default\", \"eval\"; nothing was "
                                    "sent"),
              std::string::npos)
        << status.ToString();
  };
  SampleBatch batch;
  ReplayInfo info;
  const std::vector<uint64_t> keys = {0};
  const std::vector<double> priorities = {1.0};
  refused(learner->Sample("r2d2", 4, 0.4, &batch));
  refused(learner->RequestSample("r2d2", 4, 0.4));
  refused(learner->Info("r2d2", &info));
  refused(learner->UpdatePriorities("r2d2", keys, priorities));
  refused(learner->SendPriorityUpdate("r2d2", keys, priorities));
  std::vector<int64_t> ids = {1, 2};
  refused(actor->Add(BatchView{2, {ids.data()}}, {}, "r2d2"));
  const std::vector<int64_t> item_steps = {0};
  refused(actor->Append(ColumnSpans{2, {std::as_bytes(std::span(ids))}}, NewItems{item_steps, {}, {}, "r2d2"}));
  EXPECT_TRUE(learner_sent_.empty());
  EXPECT_TRUE(actor_sent_.empty());
  EXPECT_EQ(learner->samples_in_flight(), 0);
  EXPECT_EQ(actor->steps_appended(), 0);
  ASSERT_TRUE(actor->Close().ok());
  ASSERT_TRUE(learner->Close().ok());
}

// Priority updates to a table that keeps no priorities are refused by the
// client (both kinds), nothing sent; a heap keeps priorities: its update goes
// out naming it (and this one-table server refuses the table).
TEST_F(TablesLoopbackTest, UpdatesToATableWithoutPrioritiesAreRefusedByTheClient) {
  std::unique_ptr<LearnerClient> learner = Learner(Tables({Uniform(), Heap()}));
  const std::vector<uint64_t> keys = {0, 1};
  const std::vector<double> priorities = {1.0, 2.0};
  for (const Status& status :
       {learner->UpdatePriorities("eval", keys, priorities), learner->SendPriorityUpdate("eval", keys, priorities)}) {
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(status.message().find("table eval samples uniform: it keeps no priorities"), std::string::npos)
        << status.ToString();
  }
  EXPECT_TRUE(learner_sent_.empty());

  const Status heap = learner->UpdatePriorities("heap", keys, priorities);
  EXPECT_EQ(heap.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(heap.message().find("table 2"), std::string::npos) << heap.ToString();
  ASSERT_EQ(learner_sent_.size(), 1u);
  proto::Frame frame;
  proto::UpdateRequest request;
  ASSERT_TRUE(proto::DecodeFrame(learner_sent_[0], &frame).ok());
  ASSERT_TRUE(proto::DecodeMeta(frame, &request).ok());
  EXPECT_EQ(request.table, 2);
  EXPECT_EQ(request.count, 2);
  ASSERT_TRUE(learner->Close().ok());
}

// Prefetched requests remember their table: a sample of another table does
// not take them (they are received and dropped) and sends its own, naming
// its table; this server refuses it, and the learner goes on.
TEST_F(TablesLoopbackTest, PrefetchedSamplesOfAnotherTableAreNotTaken) {
  std::unique_ptr<ActorClient> actor = Actor();
  AddTransitions(actor.get(), 0, 20);
  proto::TableSchemas second{"second", false, schema_, {}};
  std::unique_ptr<LearnerClient> learner = Learner(Tables({second}), /*prefetch=*/2);
  SampleBatch batch;
  ASSERT_TRUE(learner->Sample(8, 0.4, &batch).ok());
  EXPECT_EQ(batch.table, "default");
  EXPECT_EQ(learner->samples_in_flight(), 2);
  const Status other = learner->Sample("second", 8, 0.4, &batch);
  EXPECT_EQ(other.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(other.message().find("table 1"), std::string::npos)
      << other.ToString();
  EXPECT_EQ(SampledTables(), (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(learner->samples_in_flight(), 0);
  // The default table again, as before.
  ASSERT_TRUE(learner->Sample(8, 0.4, &batch).ok());
  EXPECT_EQ(batch.table, "default");
  // A request of another table in flight is received by ReceiveSample with its table's error.
  ASSERT_TRUE(learner->Sample(8, 0.4, &batch).ok());
  while (learner->samples_in_flight() > 0) ASSERT_TRUE(learner->ReceiveSample(&batch).ok());
  ASSERT_TRUE(learner->RequestSample("second", 8, 0.4).ok());
  EXPECT_EQ(learner->ReceiveSample(&batch).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(actor->Close().ok());
  ASSERT_TRUE(learner->Close().ok());
}

// An append creating items in several tables goes as one request with a
// group a table, in the order given; a table named twice, or items of a
// table whose items are computed over steps added as transitions, are
// refused by the client.
TEST_F(TablesLoopbackTest, AnAppendToSeveralTablesIsOneRequestWithAGroupATable) {
  const Schema item_columns{{{"state", DType::kFloat32, {2}}}};
  proto::TableSchemas nstep{"nstep", true, Schema{{{"sum", DType::kFloat64, {}}}}, item_columns, "prioritized", true};
  std::unique_ptr<ActorClient> actor = Actor(Tables({Uniform(), nstep}));
  EXPECT_EQ(actor->tables(), (std::vector<std::string>{"default", "eval", "nstep"}));
  EXPECT_EQ(actor->item_schema("nstep").ToString(), item_columns.ToString());
  EXPECT_TRUE(actor->item_schema("eval").columns.empty());

  std::vector<int64_t> ids = {1, 2, 3};
  const ColumnSpans steps{3, {std::as_bytes(std::span(ids))}};
  const std::vector<int64_t> eval_steps = {0, 2}, nstep_steps = {1};
  const std::vector<double> eval_priorities = {0.5, 1.5};
  const std::vector<float> state = {0.25f, 0.75f};
  const NewItems twice[] = {NewItems{eval_steps, {}, {}, "eval"}, NewItems{nstep_steps, {}, {}, "eval"}};
  const Status named_twice = actor->Append(steps, twice);
  EXPECT_EQ(named_twice.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(named_twice.message().find("two NewItems name table \"eval\""), std::string::npos)
      << named_twice.ToString();
  const NewItems missing_columns[] = {NewItems{nstep_steps, {}, {}, "nstep"}};
  EXPECT_EQ(actor->Append(steps, missing_columns).code(), Status::Code::kInvalidArgument);
  const Status add = actor->Add(steps, {}, "nstep");
  EXPECT_EQ(add.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(add.message().find("table \"nstep\"'s items are n-step transitions or sequences"), std::string::npos)
      << add.ToString();
  EXPECT_TRUE(actor_sent_.empty());

  const NewItems groups[] = {
      NewItems{nstep_steps, {}, ColumnSpans{1, {std::as_bytes(std::span(state))}}, "nstep"},
      NewItems{{}, {}, {}, "default"},  // no items: no group
      NewItems{eval_steps, eval_priorities, {}, "eval"}};
  ASSERT_TRUE(actor->Append(steps, groups).ok());
  ASSERT_EQ(actor_sent_.size(), 1u);
  proto::Frame frame;
  ASSERT_TRUE(proto::DecodeFrame(actor_sent_[0], &frame).ok());
  proto::DecodedAppend append;
  const int64_t item_bytes[] = {0, 0, item_columns.ItemBytes()};
  const Status decoded = proto::DecodeAppend(frame, schema_.ItemBytes(), item_bytes, &append);
  ASSERT_TRUE(decoded.ok()) << decoded.ToString();
  EXPECT_EQ(append.meta.first_step, 0);
  EXPECT_EQ(append.meta.steps, 3);
  ASSERT_EQ(append.groups.size(), 2u);
  EXPECT_EQ(append.groups[0].table, 2);
  EXPECT_EQ(append.groups[0].item_steps, nstep_steps);
  EXPECT_EQ(append.groups[0].item_columns.size(), 8u);
  EXPECT_EQ(append.groups[1].table, 1);
  EXPECT_EQ(append.groups[1].item_steps, eval_steps);
  EXPECT_EQ(append.groups[1].priorities, eval_priorities);
  // This server has one table: it refuses the append, reported by Flush.
  const Status flushed = actor->Flush();
  EXPECT_EQ(flushed.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(flushed.message().find("names table 2; this server has 1 table"), std::string::npos)
      << flushed.ToString();
  EXPECT_EQ(actor->steps_appended(), 0);

  // An add to the second table of transitions: one group, an item per step, at the stream's end.
  ASSERT_TRUE(actor->Add(steps, {}, "eval").ok());
  ASSERT_TRUE(proto::DecodeFrame(actor_sent_.back(), &frame).ok());
  ASSERT_TRUE(proto::DecodeAppend(frame, schema_.ItemBytes(), item_bytes, &append).ok());
  EXPECT_EQ(append.meta.first_step, proto::AppendMeta::kAtEnd);
  ASSERT_EQ(append.groups.size(), 1u);
  EXPECT_EQ(append.groups[0].table, 1);
  EXPECT_TRUE(append.groups[0].item_per_step);
  EXPECT_EQ(actor->Flush().code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(actor->Close().ok());
}

}  // namespace
}  // namespace perserve::client_internal
