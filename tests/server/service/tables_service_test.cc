// The service over several tables: one append creates items in two tables;
// a queue table (fifo, max_times_sampled 1) has a rate limiter and minimum
// size of its own, its samples wait for the draws they need and drain it
// oldest first, its updates are refused, and what holds an append or a
// sample is said naming the table. The other table goes on unaffected.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "server/service/service_test_util.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::service_test {
namespace {

constexpr int kActor = 0;
constexpr int kLearner = 1;

// Two tables of transitions: "main" and "queue" (fifo, max_times_sampled 1).
std::unique_ptr<replay::StepReplay> MakeTables() {
  std::vector<replay::TableConfig> tables(2);
  for (replay::TableConfig& table : tables) {
    table.layout.kind = replay::StepOptions::Kind::kTransition;
    table.layout.step_capacity = 64;
    table.layout.streams = 2;
    table.items = replay::ReplayOptions{64, 1.0, tree::Device::kCpu, 5};
  }
  tables[0].name = "main";
  tables[1].name = "queue";
  tables[1].items.sampler = table::SelectorKind::kFifo;
  tables[1].items.max_times_sampled = 1;
  std::unique_ptr<replay::StepReplay> replay;
  EXPECT_TRUE(replay::StepReplay::Create(tables, Schema{{{"id", DType::kInt64, {}}}}, &replay).ok());
  return replay;
}

class TablesServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    replay_ = MakeTables();
    Serve(replay_.get());
  }

  // A fresh transport and service over `replay`, checkpointing into `checkpoint_dir` if given.
  void Serve(replay::StepReplay* replay, const std::string& checkpoint_dir = "") {
    service_.reset();
    transport_ = std::make_unique<LoopbackTransport>(2);
    transport_->SetRole(kActor, ClientRole::kActor);
    transport_->SetRole(kLearner, ClientRole::kLearner);
    ServiceOptions options;
    options.stats_interval_seconds = 0.0;
    options.min_size_to_sample = 1;
    options.checkpoint_dir = checkpoint_dir;
    // The queue: one sample per insert, within 4 items either way.
    options.tables = {RateLimiterOptions{0.0, 0.0, 1}, RateLimiterOptions{1.0, 4.0, 1}};
    service_ = std::make_unique<ReplayService>(replay, transport_.get(), options);
  }

  // `count` steps with ids from the actor's next, each an item of both tables.
  void PushAppend(uint64_t request_id, int64_t count) {
    std::vector<int64_t> ids(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) ids[static_cast<size_t>(i)] = sent_ + i;
    proto::AppendMeta meta;
    meta.first_step = sent_;
    meta.steps = count;
    meta.groups = {proto::ItemGroup{0, 0, true, false}, proto::ItemGroup{1, 0, true, false}};
    const std::span<const std::byte> columns[] = {std::as_bytes(std::span(ids))};
    const proto::ItemGroupSpans groups[] = {{}, {}};
    std::vector<std::byte> frame;
    proto::EncodeAppend(request_id, meta, columns, groups, &frame);
    transport_->Push(kActor, std::move(frame));
    sent_ += count;
  }
  void PushSample(uint64_t request_id, int64_t batch, int32_t table) {
    transport_->Push(kLearner, Frame(proto::MessageKind::kSampleRequest, request_id,
                                     proto::SampleRequest{batch, 0.0, 0.0, false, table}));
  }
  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }
  proto::Frame Reply(int client, proto::MessageKind kind, uint64_t request_id) {
    return PopReply(*transport_, client, kind, request_id, kept_);
  }
  // The ids a sample reply holds, in its order.
  std::vector<int64_t> SampledIds(const proto::Frame& frame, int64_t count) {
    std::vector<int64_t> ids(static_cast<size_t>(count));
    const size_t arrays = static_cast<size_t>(count) * (8 + 8 + 8);  // keys, weights, probabilities
    std::memcpy(ids.data(), frame.bulk.data() + arrays, ids.size() * sizeof(int64_t));
    return ids;
  }

  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<ReplayService> service_;
  std::deque<std::vector<std::byte>> kept_;
  int64_t sent_ = 0;
};

TEST_F(TablesServiceTest, AQueuesSampleWaitsForItsDrawsAndDrainsItOldestFirst) {
  PushSample(1, 4, /*table=*/1);
  Step();
  EXPECT_TRUE(transport_->outbox(kLearner).empty()) << "an empty queue: the sample waits";
  PushAppend(2, 3);
  Step();
  EXPECT_EQ(Reply(kActor, proto::MessageKind::kAddReply, 2).header.request_id, 2u);
  EXPECT_TRUE(transport_->outbox(kLearner).empty()) << "3 draws left, 4 needed";
  const std::string waits = service_->DescribeClients();
  EXPECT_NE(waits.find("new items of table queue: its 3 items have 3 draws left"), std::string::npos) << waits;
  PushAppend(3, 2);
  Step();
  Step();
  (void)Reply(kActor, proto::MessageKind::kAddReply, 3);
  const proto::Frame sample = Reply(kLearner, proto::MessageKind::kSampleReply, 1);
  EXPECT_EQ(SampledIds(sample, 4), (std::vector<int64_t>{0, 1, 2, 3})) << "a queue: the oldest first, each once";
  EXPECT_EQ(replay_->table(1).items().size(), 1) << "each drawn item left the queue";
  EXPECT_EQ(replay_->table(0).items().size(), 5) << "the other table keeps its items";
  // The main table samples as ever.
  PushSample(4, 8, /*table=*/0);
  Step();
  (void)Reply(kLearner, proto::MessageKind::kSampleReply, 4);
}

TEST_F(TablesServiceTest, UpdatesOfATableWithoutPrioritiesAndUnknownTablesAreRefused) {
  PushAppend(1, 4);
  Step();
  (void)Reply(kActor, proto::MessageKind::kAddReply, 1);
  const uint64_t key = 0;
  const double priority = 2.0;
  for (const int32_t table : {1, 7}) {
    transport_->Push(kLearner, Frame(proto::MessageKind::kUpdateRequest, 10 + table, proto::UpdateRequest{1, table},
                                     {std::as_bytes(std::span(&key, 1)), std::as_bytes(std::span(&priority, 1))}));
    Step();
    proto::ErrorReply error;
    ASSERT_TRUE(proto::DecodeMeta(Reply(kLearner, proto::MessageKind::kErrorReply, 10 + table), &error).ok());
    EXPECT_NE(error.message.find(table == 1 ? "fifo" : "table 7 is outside [0, 2): this server's tables are main, "
                                                       "queue"),
              std::string::npos)
        << error.message;
  }
  PushSample(20, 2, /*table=*/-1);
  Step();
  proto::ErrorReply error;
  ASSERT_TRUE(proto::DecodeMeta(Reply(kLearner, proto::MessageKind::kErrorReply, 20), &error).ok());
  EXPECT_NE(error.message.find("table -1 is outside"), std::string::npos) << error.message;
}

TEST_F(TablesServiceTest, TheQueuesRateLimiterHoldsAppendsAndSaysSo) {
  PushAppend(1, 3);
  Step();
  (void)Reply(kActor, proto::MessageKind::kAddReply, 1);
  PushAppend(2, 3);  // 3 + 3 inserted, none sampled: past the queue's buffer of 4
  Step();
  EXPECT_TRUE(transport_->outbox(kActor).empty()) << "held by the queue's limiter";
  const std::string held = service_->DescribeClients();
  EXPECT_NE(held.find("held adds 1"), std::string::npos) << held;
  EXPECT_NE(held.find("the rate limiter of table queue holds them"), std::string::npos) << held;
  EXPECT_NE(held.find("rate limiter of table queue samples per insert 1"), std::string::npos) << held;
  EXPECT_EQ(replay_->table(0).items().size(), 3) << "nothing of a held append is stored, in any table";
  PushSample(3, 3, /*table=*/1);
  Step();
  Step();
  (void)Reply(kLearner, proto::MessageKind::kSampleReply, 3);
  (void)Reply(kActor, proto::MessageKind::kAddReply, 2);
  EXPECT_EQ(replay_->table(0).items().size(), 6);
  EXPECT_EQ(replay_->table(1).items().size(), 3);
}

// A checkpoint holds both tables and each one's rate limiter (format 4):
// restored into a fresh replay and service, the queue holds what it held and
// its limiter holds an append a fresh limiter would let in.
TEST_F(TablesServiceTest, ACheckpointKeepsEveryTableAndItsRateLimiter) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("perserve-tables-checkpoint-{}", ::getpid());
  fs::remove_all(dir);
  Serve(replay_.get(), dir.string());
  PushAppend(1, 3);
  Step();
  (void)Reply(kActor, proto::MessageKind::kAddReply, 1);
  PushSample(2, 2, /*table=*/1);
  Step();
  (void)Reply(kLearner, proto::MessageKind::kSampleReply, 2);
  ASSERT_TRUE(service_->RequestCheckpoint("test").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (service_->checkpoints()->active() && std::chrono::steady_clock::now() < deadline) Step();
  ASSERT_FALSE(service_->checkpoints()->active());

  std::unique_ptr<replay::StepReplay> restored = MakeTables();
  CheckpointState state;
  std::string loaded;
  const Status status = LoadCheckpoint(dir.string(), 0, 1, restored.get(), &state, &loaded);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(restored->table(0).items().size(), 3);
  EXPECT_EQ(restored->table(1).items().size(), 1) << "two of the queue's three items were drawn out";
  ASSERT_EQ(state.tables.size(), 2u);
  EXPECT_EQ(state.tables[0].limiter.inserted, 3);
  EXPECT_EQ(state.tables[0].limiter.sampled, 0);
  EXPECT_EQ(state.tables[1].limiter.inserted, 3);
  EXPECT_EQ(state.tables[1].limiter.sampled, 2);

  Serve(restored.get());
  service_->Restore(state);
  PushAppend(3, 5);  // the queue: 3 + 5 inserted, 2 sampled: 1 + 5 > 1 + 4 (a fresh limiter: 0 + 5, in)
  Step();
  EXPECT_TRUE(transport_->outbox(kActor).empty()) << "the restored limiter of the queue holds the append";
  const std::string held = service_->DescribeClients();
  EXPECT_NE(held.find("the rate limiter of table queue holds them"), std::string::npos) << held;
  service_.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perserve::service::service_test
