// SimulatedClients: the raw actors and learners of a simulated run, speaking
// the wire protocol through LoopbackTransports as the client library does
// (one request id after another, an actor's adds bounded in flight, a
// learner's updates of keys it sampled), plus what users do that the library
// would not stop: requests the server must refuse, pauses in reading, early
// closes, columns apart sent before their append request (MPI lets them
// arrive first: the server keeps them for that request). Every add is an
// append (proto/append.h) whose steps are each its own item: it names its
// first step, the stream's next as the actor counts it (the steps of its
// adds not refused; after a refusal, once every add is answered, those
// acknowledged), or goes at the stream's end (kAtEnd, as the library's do). With several shards an actor talks to its own shard (i mod K), a
// learner to every shard, each request to one chosen at random. Every
// request and every reply goes through the ReferenceModel. To services of
// step streams actors append steps instead (step_clients.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/schedule_random.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/step_stream.h"
#include "server/service/loopback_transport.h"

namespace perserve::service::simulation {

// One shard's service as its clients reach it: its transport, each client's
// index there, and its replay (whose next key the model is told).
class StepModel;

struct ShardLink {
  LoopbackTransport* transport = nullptr;
  const replay::Replay* replay = nullptr;       // the table's items (keys, priorities)
  const replay::StepReplay* table = nullptr;    // the table itself: its ring and layout
  std::vector<int> index;  // by client (SimulationConfig's numbering); -1: not a client of this shard
  // The next key of table `t` (its index).
  uint64_t NextKey(int t) const { return table->table(t).items().next_key(); }
  // The steps the service holds of actor `client`'s stream: where it goes on, as the join says.
  int64_t StreamSteps(int client) const {
    return table->steps().stream_steps(index[static_cast<size_t>(client)]);
  }
};

class SimulatedClients {
 public:
  // `later_random`: the stream of features added after seeds were pinned;
  // `library_random`: the third (shards), drawn from only with several shards
  // or config.awaited_samples. The raw clients are the first
  // config.actors + config.learners. `steps`: the model of step streams,
  // when the services store them (config.steps.on): actors append steps.
  // `tables_random`: the sixth (several tables), drawn from only when the
  // services hold several. `run`: the job's life (0; after a crash-restart
  // 1, 2 ...): actors of step streams go on from the steps the restored
  // service holds of their streams, as the join tells them.
  SimulatedClients(const SimulationConfig& config, ScheduleRandom* random, ScheduleRandom* later_random,
                   ScheduleRandom* library_random, ScheduleRandom* tables_random, ReferenceModel* model,
                   std::vector<ShardLink>* shards, const StepModel* steps = nullptr, int run = 0);

  int count() const { return static_cast<int>(clients_.size()); }
  // One thing `client` does now, chosen at random (perhaps nothing).
  void Act(int client);
  // A tick of its reading: columns it sent apart may arrive, and it reads a
  // few replies, unless it stopped reading for a while. A learner may send a
  // shard sample too.
  void Tick(int client);
  // From now on it makes no requests: all its columns arrive, it reads every
  // reply, and sends its close now or later (at random).
  void Finish(int client);
  bool close_sent(int client) const { return clients_[client].close_sent; }

  int64_t replies() const { return replies_; }
  // Columns messages sent apart from their append request, and of them those sent before it.
  int64_t columns_apart() const { return columns_apart_; }
  int64_t columns_first() const { return columns_first_; }
  // Of every reply received, in order (headers and bulk; not the meta, whose
  // error texts and checkpoint paths name the run's directory).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  struct Client {
    explicit Client(ClientRole client_role) : role(client_role) {}
    ClientRole role;
    uint64_t next_request_id = 1;
    int64_t next_item = 0;  // an actor's next item number
    int paused_ticks = 0;   // ticks left in which it reads nothing
    bool close_sent = false;
    std::deque<std::vector<std::byte>> columns;  // columns apart sent but not arrived yet, oldest first
    std::vector<uint64_t> sampled_keys;          // a learner's recent sampled keys, for its updates ...
    std::vector<int> sampled_tables;             // ... and the table of each
    std::map<uint64_t, int> sample_tables;       // its samples not answered yet: their tables
    // An actor's stream: with step streams its view (step_clients.cc); the
    // steps its adds of transitions name next; the steps the server
    // acknowledged, its adds and appends unanswered (id: steps), and
    // whether one was refused (then it goes on from the acknowledged steps
    // once every one is answered).
    std::unique_ptr<StepStream> stream;
    int64_t steps_sent = 0;
    int64_t steps_acknowledged = 0;
    std::map<uint64_t, int64_t> appends;
    bool stream_refused = false;
  };

  // The shard `client`'s next request goes to: an actor's own; a learner's
  // chosen at random (no draw with one shard).
  int PickShard(int client);
  // The table a learner's sample names (no draw with one table).
  int PickTable();
  uint64_t NextKey(int shard, int table = 0) const { return shards_[static_cast<size_t>(shard)].NextKey(table); }
  void Add(int client);
  // An append of steps with items over them, now and then one the server
  // must refuse (step_clients.cc); and what its reply says of the stream.
  void AppendSteps(int client);
  void AppendAnswered(int client, std::span<const std::byte> reply);
  // A request's timeout: one that fires within the run, or one that never does.
  double Timeout();
  void Sample(int client);
  void ShardSample(int client);
  void Update(int client);
  void Close(int client);
  void AskCheckpoint(int client);
  void Push(int client, int shard, std::vector<std::byte> frame, int tag = proto::kRequestTag);
  void ColumnsArrive(int client, size_t how_many);
  // Sends `columns` (of the request about to be sent) before the request:
  // the columns of earlier appends arrive first (they are matched in order).
  void ColumnsBeforeRequest(int client, std::vector<std::byte> columns);
  // `client` receives up to `most` replies, each shard's in the order they were sent.
  void Read(int client, int64_t most);

  const SimulationConfig& config_;
  ScheduleRandom& random_;
  ScheduleRandom& later_random_;
  ScheduleRandom& library_random_;
  ScheduleRandom& tables_random_;
  ReferenceModel& model_;
  std::vector<ShardLink>& shards_;
  const StepModel* steps_;
  std::vector<Client> clients_;
  int64_t replies_ = 0;
  int64_t columns_apart_ = 0, columns_first_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace perserve::service::simulation
