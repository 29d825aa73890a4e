// The loopback shards the client's tests over several shards share
// (shard_sampler_loopback_test.cc, shard_parts_loopback_test.cc): the real
// LearnerClient over a Connection into one ReplayService per shard, each on
// its own LoopbackTransport (client 0 an actor the test drives with raw
// frames, client 1 the learner), all stepped while the learner waits.
#pragma once

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "client/src/connection.h"
#include "perserve/client.h"
#include "proto/codec.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/service/loopback_transport.h"
#include "server/service/service_test_util.h"
#include "service/replay_service.h"

namespace perserve::client_internal {

struct TestAccess {
  static std::unique_ptr<LearnerClient> Learner(std::unique_ptr<Connection> connection, ClientOptions options) {
    return std::unique_ptr<LearnerClient>(new LearnerClient(std::move(connection), options));
  }
};

namespace sharded_loopback {

using Clock = std::chrono::steady_clock;
constexpr int kActor = 0;
constexpr int kLearner = 1;

struct Shard {
  std::unique_ptr<replay::StepReplay> replay;
  int64_t steps = 0;  // its actor's stream's
  std::unique_ptr<service::LoopbackTransport> transport;
  std::unique_ptr<service::ReplayService> service;
};

// The learner's link to every shard: SendTo pushes into that shard's
// transport; a receive steps every service (and the test's hook) until one
// has a reply for the learner, for at most 20 s of wall time (deadlines run
// on the clock).
class ShardedLoopbackConnection final : public Connection {
 public:
  ShardedLoopbackConnection(std::vector<Shard>* shards, std::function<void()> between_steps)
      : shards_(shards), between_steps_(std::move(between_steps)) {}

  const Schema& schema() const override { return shards_->front().replay->step_schema(); }
  // The tables the learner is told of (none set: the Connection's default, one table).
  const std::vector<proto::TableSchemas>& tables() const override {
    return tables_.empty() ? Connection::tables() : tables_;
  }
  void set_tables(std::vector<proto::TableSchemas> tables) { tables_ = std::move(tables); }
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) override {
    std::vector<std::byte> buffer;
    buffer.reserve(expected_bytes);
    return buffer;
  }
  Status Send(std::vector<std::byte> frame) override { return SendTo(0, std::move(frame)); }
  int shard_count() const override { return static_cast<int>(shards_->size()); }
  Status SendTo(int shard, std::vector<std::byte> frame) override {
    proto::Frame decoded;
    proto::ShardSampleRequest request;
    proto::SampleRequest part;
    if (proto::DecodeFrame(frame, &decoded).ok() && decoded.kind() == proto::MessageKind::kShardSampleRequest &&
        proto::DecodeMeta(decoded, &request).ok()) {
      sent_.push_back(request);
    }
    if (proto::DecodeFrame(frame, &decoded).ok() && decoded.kind() == proto::MessageKind::kSampleRequest &&
        proto::DecodeMeta(decoded, &part).ok()) {
      parts_sent_.emplace_back(shard, part);
    }
    (*shards_)[static_cast<size_t>(shard)].transport->Push(kLearner, std::move(frame));
    return Status::Ok();
  }
  Status Peers(MPI_Comm*) const override { return Status::Unimplemented("no peers over the loopback"); }

  // Every shard sample request the learner sent, in order.
  const std::vector<proto::ShardSampleRequest>& sent() const { return sent_; }
  // Every plain sample request (a part of a table drawn by its own selector), with its shard.
  const std::vector<std::pair<int, proto::SampleRequest>>& parts_sent() const { return parts_sent_; }

 protected:
  Status ReceiveReply(bool wait, std::vector<std::byte>* message, size_t* length, bool* received) override {
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(20);
    while (true) {
      if (between_steps_) between_steps_();
      for (Shard& shard : *shards_) {
        bool handled = false;
        PERSERVE_RETURN_IF_ERROR(shard.service->Step(&handled));
        shard.transport->outbox(kActor).clear();  // the test's actor reads nothing
      }
      for (Shard& shard : *shards_) {
        std::deque<std::vector<std::byte>>& outbox = shard.transport->outbox(kLearner);
        *received = !outbox.empty();
        if (!*received) continue;
        *message = std::move(outbox.front());
        *length = message->size();
        outbox.pop_front();
        return Status::Ok();
      }
      if (!wait) return Status::Ok();
      if (Clock::now() > give_up) return Status::Internal("no reply within 20 s");
    }
  }
  Status ProgressSends() override { return Status::Ok(); }
  Status DrainSends() override { return Status::Ok(); }

 private:
  std::vector<Shard>* shards_;
  std::function<void()> between_steps_;
  std::vector<proto::ShardSampleRequest> sent_;
  std::vector<std::pair<int, proto::SampleRequest>> parts_sent_;
  std::vector<proto::TableSchemas> tables_;
};

class ShardSamplerLoopbackTest : public ::testing::Test {
 protected:
  // `count` shards, each with these options (its shard index set), their
  // one table of transitions sampled by `sampler`.
  void StartShards(int count, int64_t capacity, service::ServiceOptions options,
                   table::SelectorKind sampler = table::SelectorKind::kPrioritized, int64_t max_times_sampled = 0) {
    const Schema schema{{Column{"id", DType::kInt64, {}}}};
    shards_.resize(static_cast<size_t>(count));
    for (int s = 0; s < count; ++s) {
      Shard& shard = shards_[static_cast<size_t>(s)];
      replay::StepOptions steps;
      steps.kind = replay::StepOptions::Kind::kTransition;
      steps.step_capacity = capacity;
      steps.streams = 2;
      replay::ReplayOptions items{capacity, 1.0, tree::Device::kCpu, 17u + static_cast<uint64_t>(s)};
      items.sampler = sampler;
      items.max_times_sampled = max_times_sampled;
      ASSERT_TRUE(replay::StepReplay::Create(steps, items, schema, &shard.replay).ok());
      shard.transport = std::make_unique<service::LoopbackTransport>(2);
      shard.transport->SetRole(kActor, service::ClientRole::kActor);
      shard.transport->SetRole(kLearner, service::ClientRole::kLearner);
      options.shard = s;
      options.shards = count;
      options.stats_interval_seconds = 0.0;
      shard.service = std::make_unique<service::ReplayService>(shard.replay.get(), shard.transport.get(), options);
    }
  }

  static service::ServiceOptions MinSize(int64_t min_size) {
    service::ServiceOptions options;
    options.min_size_to_sample = min_size;
    return options;
  }

  // A learner over the shards, told of `tables` (none: the Connection's default, one prioritized table).
  std::unique_ptr<LearnerClient> Learner(bool exact_totals, int prefetch = 0,
                                         std::vector<proto::TableSchemas> tables = {}) {
    ClientOptions options;
    options.exact_shard_totals = exact_totals;
    options.prefetch = prefetch;
    options.shard_seed = 5;
    auto connection = std::make_unique<ShardedLoopbackConnection>(&shards_, [this] {
      if (between_steps_) between_steps_();
    });
    connection->set_tables(std::move(tables));
    connection_ = connection.get();
    return TestAccess::Learner(std::move(connection), options);
  }

  // `count` items of priority `priority` into shard `s`, from its actor (stepped until stored).
  void Add(int s, int64_t count, double priority) {
    std::vector<int64_t> ids(static_cast<size_t>(count), s);
    std::vector<double> priorities(static_cast<size_t>(count), priority);
    Shard& shard = shards_[static_cast<size_t>(s)];
    shard.transport->Push(kActor, service::service_test::AddFrame(next_id_++, shard.steps, count,
                                                                  std::as_bytes(std::span(ids)), priorities));
    shard.steps += count;
    bool handled = false;
    ASSERT_TRUE(shard.service->Step(&handled).ok());
  }

  // Shard `s`'s actor closes.
  void CloseActor(int s) {
    std::vector<std::byte> frame;
    proto::EncodeFrame(proto::MessageKind::kCloseRequest, next_id_++, proto::Empty{}, {}, &frame);
    Shard& shard = shards_[static_cast<size_t>(s)];
    shard.transport->Push(kActor, std::move(frame));
    bool handled = false;
    ASSERT_TRUE(shard.service->Step(&handled).ok());
  }

  static int ShardsIn(const SampleBatch& batch, int shard) {
    int count = 0;
    for (const uint64_t key : batch.keys) count += proto::ShardOfKey(key) == shard;
    return count;
  }

  std::vector<Shard> shards_;
  std::function<void()> between_steps_;
  ShardedLoopbackConnection* connection_ = nullptr;
  uint64_t next_id_ = 1;
};

}  // namespace sharded_loopback
}  // namespace perserve::client_internal
