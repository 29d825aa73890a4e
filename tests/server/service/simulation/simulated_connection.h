// SimulatedConnection: the real client library (ActorClient, LearnerClient
// and its ShardSampler) inside the deterministic simulation. Each library
// client runs in a Fiber; its Connection sends into the shards'
// LoopbackTransports (an actor to its shard, a learner to every shard), and
// where the library blocks (a reply, a send to complete) the fiber yields:
// the simulator runs ticks (other clients act, the services step) and
// resumes it once what it waits for is there. Its clock is the simulation's.
//
// Every frame sent and every reply received goes through the ReferenceModel
// (each request answered once, with what it may get), and what the library
// received is kept for the checks of what it returns (LibraryClients): the
// replies with drawn items, the error codes, the add and update results.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/src/connection.h"
#include "perserve/client.h"
#include "server/service/simulation/fiber.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/schedule_random.h"
#include "server/service/simulation/simulated_clients.h"
#include "server/service/simulation/simulation_config.h"

namespace perserve::service::simulation {

class StepModel;

// How much of the library's side a run exercised (the many seeds' summary).
struct LibraryCounts {
  int64_t batches = 0;              // sampled batches checked
  int64_t exact_batches = 0;        // of them, checked against one replay of the union as it is
  int64_t lent_sends = 0;           // lent columns past the eager limit, read when the server received them
  int64_t columns_apart = 0;        // appends whose step columns the library sent apart (into the ring)
  int64_t blocked_calls = 0;        // waits in which the simulation ran ticks
  int64_t rejections_reported = 0;  // refused adds the library reported
  int64_t other_table_batches = 0;  // batches of a table but the default checked (several tables)
};

// What the library clients share with the simulator.
struct LibraryWorld {
  const SimulationConfig& config;
  ScheduleRandom& random;          // the trace (and its step count)
  ScheduleRandom& library_random;  // every choice of the library clients and their connections
  ReferenceModel& model;
  std::vector<ShardLink>& shards;
  // By shard: how many steps changed its replay (keys, total or smallest
  // leaf), so a check knows when nothing changed.
  std::vector<uint64_t>& versions;
  LibraryCounts& counts;
  const StepModel* steps = nullptr;  // with step streams: their model (the batches' bytes)
  int run = 0;  // the job's life: 0, then 1, 2 ... after each crash-restart (the simulator's)
};

// A reply with drawn items, as received: a shard sample's (keys and leaves,
// the shard's state) or, with one shard, a sample's (keys, weights, probabilities).
struct DrawnReply {
  int shard = 0;
  uint64_t request_id = 0;
  std::vector<uint64_t> keys;
  std::vector<double> leaves;                  // a shard sample's
  proto::ShardSampleReply state;               // a shard sample's
  std::vector<double> weights, probabilities;  // a sample's
  double beta = 0.0;                           // a sample's request's
  std::vector<uint64_t> versions;              // the shards' replay versions when its request was sent
};

class SimulatedConnection final : public client_internal::Connection {
 public:
  SimulatedConnection(int client, LibraryWorld* world, Fiber* fiber);

  // The actor's next add request carries `actor`'s items from `first_item`;
  // `valid`: false for one the server must refuse (more items than it holds).
  void NextAdd(int64_t first_item, bool valid) {
    next_add_first_item_ = first_item;
    next_add_valid_ = valid;
  }
  // The run has failed: from now on nothing is sent and every wait fails at once.
  void Abort() { aborted_ = true; }

  // For the scheduler: whether the library is blocked in a wait, and whether
  // what it waits for is there now.
  bool blocked() const { return waiting_ != Waiting::kNothing; }
  bool CanProceed() const;
  std::string DescribeWait() const;

  // What the library received, for the checks of what it returns.
  std::deque<DrawnReply>& drawn(int shard) { return drawn_[static_cast<size_t>(shard)]; }
  // Error codes of replies received (each allowed by the model).
  const std::set<int>& error_codes() const { return error_codes_; }
  // Whether a shard refused this client FAILED_PRECONDITION (no actor left there).
  bool refused_by(int shard) const { return refused_by_.count(shard) > 0; }
  // The adds answered with an error, by request id: their codes.
  const std::map<uint64_t, int>& add_errors() const { return add_errors_; }
  int64_t items_acknowledged() const { return items_acknowledged_; }
  const UpdateResult& updates() const { return updates_; }
  int64_t frames_sent() const { return frames_sent_; }
  uint64_t fingerprint() const { return fingerprint_; }
  void Fingerprint(std::span<const std::byte> bytes);

  // client_internal::Connection.
  // As the join's ServedSchemas say: a step's columns (a transition's, when
  // the items are the steps), what a sample returns, whether items are over
  // steps, and the ring's free slots past its newest step (an append of up
  // to that many steps may send its columns apart).
  const Schema& schema() const override { return shards_.front().table->step_schema(); }
  const Schema& sample_schema() const override { return shards_.front().table->sample_schema(); }
  bool steps() const override { return !shards_.front().table->RowsAreSteps(); }
  int64_t max_steps_apart() const override {
    return shards_[static_cast<size_t>(servers_.front().shard)].table->steps().slack();
  }
  const Schema& item_schema() const override { return item_schema_; }
  // As the join says: an actor's stream's steps its service holds (0 but after a restore).
  int64_t first_step() const override;
  // Every table, as the join's ServedSchemas give them (ServedSchemasOf the first shard's replay).
  const std::vector<proto::TableSchemas>& tables() const override;
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) override;
  Status Send(std::vector<std::byte> frame) override { return SendTo(0, std::move(frame)); }
  int shard_count() const override { return static_cast<int>(servers_.size()); }
  Status SendTo(int shard, std::vector<std::byte> frame) override;
  bool SendsColumnsApart() const override { return true; }
  Status SendColumns(std::vector<std::byte> columns) override;
  Status SendColumnsFrom(std::span<const std::span<const std::byte>> columns, uint64_t* token) override;
  Status AwaitSent(uint64_t token) override;
  Status Peers(MPI_Comm*) const override { return Status::Unimplemented("no peers in the simulation"); }
  std::chrono::steady_clock::time_point Now() const override { return world_.model.now(); }

 protected:
  Status ReceiveReply(bool wait, std::vector<std::byte>* buffer, size_t* length, bool* received) override;
  Status ProgressSends() override { return Status::Ok(); }
  Status DrainSends() override;

 private:
  enum class Waiting { kNothing, kReply, kSent, kDrain };
  struct Sent {
    int server;      // index in servers_
    uint64_t token;  // the transport's
    size_t bytes;
    bool lent;
  };
  // The shards this client talks to (an actor its own, a learner every one), in shard order.
  struct Server {
    int shard;
    LoopbackTransport* transport;
    int index;
  };

  // Yields until the scheduler resumes it; the error once the run has failed.
  Status Wait(Waiting what, uint64_t token = 0);
  bool Completed(const Sent& sent) const;
  // Tells the model of a request frame sent to `shard`.
  void Observe(int shard, std::span<const std::byte> frame);
  // Keeps what a reply says for the checks.
  void Record(int shard, std::span<const std::byte> reply);
  uint64_t Track(int server, uint64_t token, size_t bytes, bool lent);

  const int client_;
  LibraryWorld& world_;
  Fiber* fiber_;
  std::vector<ShardLink>& shards_;
  std::vector<Server> servers_;
  std::vector<Sent> sends_;  // every tracked send, by this connection's token - 1
  Waiting waiting_ = Waiting::kNothing;
  uint64_t wait_token_ = 0;
  bool aborted_ = false;
  int64_t next_add_first_item_ = 0;
  bool next_add_valid_ = true;
  std::map<uint64_t, proto::MessageKind> kinds_;             // of requests not answered yet
  std::map<uint64_t, double> betas_;                         // of sample requests not answered yet
  std::set<uint64_t> other_tables_;
  mutable std::vector<proto::TableSchemas> tables_;  // tables()', made on first use  // samples and shard samples not answered yet of a table but the default
  std::map<uint64_t, std::vector<uint64_t>> sent_versions_;  // of requests not answered yet
  std::vector<std::deque<DrawnReply>> drawn_;
  std::set<int> error_codes_;
  std::set<int> refused_by_;
  std::map<uint64_t, int> add_errors_;
  int64_t items_acknowledged_ = 0;
  UpdateResult updates_;
  int64_t frames_sent_ = 0;
  uint64_t fingerprint_ = 0;
  const Schema item_schema_;  // step streams': the items' columns
};

}  // namespace perserve::service::simulation
