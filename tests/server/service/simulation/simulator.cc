#include "server/service/simulation/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "replay/replay.h"
#include "server/service/checkpoint/memory_file_system.h"
#include "server/service/simulation/checkpoint_checks.h"
#include "server/service/simulation/library_actor.h"
#include "server/service/simulation/library_learner.h"
#include "server/service/simulation/library_step_actor.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/schedule_random.h"
#include "server/service/simulation/self_checking_rows.h"
#include "server/service/simulation/simulated_clients.h"
#include "server/service/simulation/service_timers.h"
#include "server/service/simulation/simulated_connection.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/step_model.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"

namespace perserve::service::simulation {
namespace {

// Once the clients stop working, the services must reach done() within this
// many steps (every client reads all its replies each step).
constexpr int64_t kLivenessSteps = 2000;

// Every configuration's draws: the first two streams' as before, then the
// third's, then the fourth's (step streams), the fifth's (timers) and the
// sixth's (tables).
SimulationConfig DrawWholeConfig(ScheduleRandom* random, ScheduleRandom* later, ScheduleRandom* library,
                                 ScheduleRandom* steps, ScheduleRandom* timers, ScheduleRandom* tables) {
  SimulationConfig config = DrawConfig(random->generator(), later->generator());
  DrawLibraryConfig(library->generator(), &config);
  config.steps = DrawStepConfig(steps->generator(), &config.options.min_size_to_sample);
  DrawTimers(timers->generator(), config.checkpoints, &config.options);
  DrawTables(tables->generator(), &config);
  return config;
}

// One shard of the replay: its service, its one table (a StepReplay, whose
// items' Replay holds the keys and priorities) and transport, and what the
// simulator keeps of it.
struct Shard {
  std::vector<replay::ReplayOptions> table_options;  // each table's items'
  std::unique_ptr<LoopbackTransport> transport;
  std::unique_ptr<replay::StepReplay> replay;
  std::unique_ptr<ReplayService> service;
  int pending_signal = 0;
  std::optional<Snapshot> snapshot;
  std::string last_checked_path;
  // What its items looked like after the last step (a change bumps its version).
  uint64_t next_key = 0;
  int64_t size = 0;
  double total = 0.0, min_leaf = 0.0;
  bool items_changed = true;  // keys issued or items held changed in the last step
};

class Simulator {
 public:
  explicit Simulator(uint64_t seed)
      : random_(seed),
        later_random_(ScheduleRandom::LaterFeaturesSeed(seed)),
        library_random_(ScheduleRandom::LibrarySeed(seed)),
        steps_random_(ScheduleRandom::StepsSeed(seed)),
        timers_random_(ScheduleRandom::TimersSeed(seed)),
        tables_random_(ScheduleRandom::TablesSeed(seed)),
        config_(DrawWholeConfig(&random_, &later_random_, &library_random_, &steps_random_, &timers_random_,
                                &tables_random_)),
        model_(config_),
        step_model_(config_, &links_),
        versions_(static_cast<size_t>(config_.shards), 0),
        world_{config_, random_, library_random_, model_, links_, versions_, counts_, &step_model_} {}
  ~Simulator() {
    AbortLibraryClients();
    library_.clear();
    clients_.reset();
    // Each service's checkpoint writer (and helper thread) before the files.
    for (Shard& shard : shards_) shard.service.reset();
  }

  SimulationResult Run();

 private:
  int raw_clients() const { return config_.actors + config_.learners; }

  void Start();
  void WorkTick();
  bool DrainTick();  // true once every client has its close reply
  // The library clients' turns this tick, in a random order.
  void LibraryTick(bool work);
  void SimulatorActs();
  // A tick's steps: each shard steps (the first with 70% odds as it always
  // did, the others drawn from the third stream), or with `all` every one.
  void StepShards(bool all);
  void StepShard(int shard);
  void CheckCheckpoint(int shard);
  void CheckEnd();
  // What waits: every service's clients and every library client's call.
  std::string DescribeWaits() const;
  void AbortLibraryClients();

  ScheduleRandom random_, later_random_, library_random_, steps_random_, timers_random_, tables_random_;
  const SimulationConfig config_;
  ReferenceModel model_;
  StepModel step_model_;  // used when config_.steps.on
  StepCounts restored_counts_;  // what restoring its checkpoints checked
  std::vector<uint64_t> versions_;
  std::vector<ShardLink> links_;
  LibraryCounts counts_;
  LibraryWorld world_;
  // Where the checkpoints go: kept in memory, the simulation's own.
  checkpoint_test::MemoryFileSystem files_;
  std::vector<Shard> shards_;
  std::unique_ptr<SimulatedClients> clients_;
  std::vector<std::unique_ptr<LibraryClient>> library_;
  std::optional<ServiceTimers> timers_;  // the services' periodic checkpoints and stats lines
  // The services' clock: deadlines and SIGTERM's grace fire at the same step of every run.
  static constexpr std::chrono::milliseconds kStepTime{1};
  std::chrono::steady_clock::time_point now_ = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  bool terminated_ = false;
  int64_t file_limit_ = -1;  // bytes a file may grow to during a spell of faults (files_'s); < 0: none
  SimulationResult result_;
};

SimulationResult Simulator::Run() {
  result_.config = config_.Describe() + DescribeTimers(config_.options);
  result_.shards = config_.shards;
  result_.library_clients = config_.library_actors + config_.library_learners;
  result_.step_streams = config_.steps.on;
  result_.tables = config_.tables();
  try {
    Start();
    for (int tick = 0; tick < config_.work_ticks; ++tick) WorkTick();
    const int64_t drain_began = result_.steps;
    while (!DrainTick()) {
      if (result_.steps - drain_began > kLivenessSteps) {
        throw SimulationFailure(fmt::format("not every client closed within {} steps after they stopped working: {}",
                                            kLivenessSteps, DescribeWaits()));
      }
    }
    CheckEnd();
    result_.replies = clients_->replies();
    for (const Shard& shard : shards_) result_.deadlines_exceeded += shard.service->counters().deadlines_exceeded;
    result_.fingerprint = clients_->fingerprint();
    result_.batches = counts_.batches;
    result_.exact_batches = counts_.exact_batches;
    result_.lent_sends = counts_.lent_sends;
    result_.blocked_calls = counts_.blocked_calls;
    result_.other_table_batches = counts_.other_table_batches;
    result_.columns_apart = clients_->columns_apart() + counts_.columns_apart;
    result_.columns_first = clients_->columns_first();
    result_.step_counts = step_model_.counts();
    result_.step_counts.Add(restored_counts_);
    result_.periodic_checkpoints = timers_->periodic_checkpoints();
    result_.stats_lines = timers_->stats_lines();
    if (!library_.empty()) {
      Hash64 hash;
      hash.Update(std::as_bytes(std::span(&result_.fingerprint, 1)));
      for (const auto& client : library_) {
        const uint64_t fingerprint = client->fingerprint();
        hash.Update(std::as_bytes(std::span(&fingerprint, 1)));
      }
      result_.fingerprint = hash.Finish();
    }
  } catch (const SimulationFailure& failure) {
    result_.passed = false;
    result_.failure = fmt::format("at step {}: {}", result_.steps, failure.what());
  } catch (const std::exception& error) {
    result_.passed = false;
    result_.failure = fmt::format("at step {}: unexpected exception: {}", result_.steps, error.what());
  }
  if (!result_.passed) AbortLibraryClients();  // outside the catch: fibers switch
  Hash64 schedule;
  for (ScheduleRandom* random :
       {&random_, &later_random_, &library_random_, &steps_random_, &timers_random_, &tables_random_}) {
    const uint64_t digest = random->generator().digest();
    schedule.Update(std::as_bytes(std::span(&digest, 1)));
  }
  result_.schedule = schedule.Finish();
  return result_;
}

void Simulator::Start() {
  const int shards = config_.shards;
  shards_.resize(static_cast<size_t>(shards));
  links_.resize(static_cast<size_t>(shards));
  // Each shard's clients, in client order: its actors and every learner.
  for (int s = 0; s < shards; ++s) {
    ShardLink& link = links_[static_cast<size_t>(s)];
    int next_index = 0;
    for (int client = 0; client < config_.clients(); ++client) {
      const bool talks = !config_.actor(client) || config_.ShardOfActor(client) == s;
      link.index.push_back(talks ? next_index++ : -1);
    }
    Shard& shard = shards_[static_cast<size_t>(s)];
    shard.transport = std::make_unique<LoopbackTransport>(next_index);
    shard.transport->SetEagerLimit(config_.eager_limit);
    shard.transport->SendRowsInPlace(config_.rows_in_place);
    for (int client = 0; client < config_.clients(); ++client) {
      if (link.index[static_cast<size_t>(client)] < 0) continue;
      shard.transport->SetRole(link.index[static_cast<size_t>(client)],
                               config_.actor(client) ? ClientRole::kActor : ClientRole::kLearner);
      // The simulation's numbering, not the index on this shard's transport.
      shard.transport->SetName(link.index[static_cast<size_t>(client)], fmt::format("client {}", client));
    }
    link.transport = shard.transport.get();
  }
  // One alpha for every shard (the join refuses shards that differ); a seed each.
  replay::ReplayOptions replay_options;
  replay_options.capacity = config_.capacity;
  replay_options.alpha = random_.Uniform(0.0, 1.0);
  replay_options.device = tree::Device::kCpu;
  replay_options.seed = random_.generator().Bits();
  replay_options.priority_eps = config_.priority_eps;
  replay_options.drop_bad_priorities = config_.drop_bad_priorities;
  replay_options.max_priority_from_adds = random_.Chance(0.5);
  for (int s = 0; s < shards; ++s) {
    Shard& shard = shards_[static_cast<size_t>(s)];
    shard.table_options = {replay_options};
    if (s > 0) shard.table_options[0].seed = library_random_.generator().Bits();
    // The tables beside the default one: their own capacity, alpha, sampler, remover and max_times_sampled (a
    // seed each shard), the default one's priority policy.
    for (int t = 1; t < config_.tables(); ++t) {
      const replay::ReplayOptions& drawn = config_.steps.tables[static_cast<size_t>(t)].items;
      replay::ReplayOptions options = replay_options;
      options.capacity = drawn.capacity;
      options.alpha = drawn.alpha;
      options.seed = drawn.seed + static_cast<uint64_t>(s);
      options.sampler = drawn.sampler;
      options.remover = drawn.remover;
      options.max_times_sampled = drawn.max_times_sampled;
      shard.table_options.push_back(options);
    }
    const Status created =
        CreateShardReplay(config_, shard.transport->client_count(), shard.table_options, &shard.replay);
    if (!created.ok()) throw SimulationFailure("the replay: " + created.ToString());
    links_[static_cast<size_t>(s)].replay = &shard.replay->items();
    links_[static_cast<size_t>(s)].table = shard.replay.get();
  }
  ServiceOptions options = config_.options;
  if (config_.checkpoints) {
    options.checkpoint_dir = "/checkpoints";  // each shard writes under its own shard-<s>-of-<K>
    options.checkpoint_file_system = &files_;
  }
  options.clock = [this] { return now_; };
  options.shards = shards;
  timers_.emplace(options, shards, now_);
  model_.SetNow(now_);
  if (config_.steps.on) {
    step_model_.Start();
    model_.SetStepModel(&step_model_);
  }
  clients_ = std::make_unique<SimulatedClients>(config_, &random_, &later_random_, &library_random_, &tables_random_,
                                                &model_, &links_, &step_model_);
  for (int client = raw_clients(); client < config_.clients(); ++client) {
    if (config_.actor(client)) {
      if (config_.steps.on) {
        library_.push_back(std::make_unique<LibraryStepActor>(client, &world_));
      } else {
        library_.push_back(std::make_unique<LibraryActor>(client, &world_));
      }
    } else {
      library_.push_back(std::make_unique<LibraryLearner>(client, &world_));
    }
  }
  // The roles first: a service counts them when it is made.
  for (int s = 0; s < shards; ++s) {
    Shard& shard = shards_[static_cast<size_t>(s)];
    options.shard = s;
    options.take_signal = [this, s] { return std::exchange(shards_[static_cast<size_t>(s)].pending_signal, 0); };
    shard.service = std::make_unique<ReplayService>(shard.replay.get(), shard.transport.get(), options);
  }
}

void Simulator::WorkTick() {
  for (int64_t actions = random_.Pick(0, 3); actions > 0; --actions) {
    clients_->Act(static_cast<int>(random_.Pick(0, raw_clients() - 1)));
  }
  for (int client = 0; client < raw_clients(); ++client) clients_->Tick(client);
  LibraryTick(/*work=*/true);
  SimulatorActs();
  StepShards(/*all=*/false);
}

bool Simulator::DrainTick() {
  bool all_closed = true;
  for (int client = 0; client < raw_clients(); ++client) {
    clients_->Finish(client);
    all_closed &= model_.closed(client);
  }
  LibraryTick(/*work=*/false);
  for (const auto& client : library_) all_closed &= client->closed();
  if (all_closed) return true;
  StepShards(/*all=*/true);
  return false;
}

void Simulator::LibraryTick(bool work) {
  if (library_.empty()) return;
  std::vector<size_t> order(library_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[static_cast<size_t>(library_random_.Pick(0, static_cast<int64_t>(i) - 1))]);
  }
  for (const size_t i : order) library_[i]->Tick(work);
}

void Simulator::SimulatorActs() {
  if (config_.signals && random_.Chance(0.01)) {
    for (Shard& shard : shards_) shard.pending_signal = SIGUSR1;  // a job's signal reaches every rank
    random_.Trace("SIGUSR1");
  }
  if (config_.signals && !terminated_ && random_.Chance(0.002)) {
    for (Shard& shard : shards_) shard.pending_signal = SIGTERM;
    terminated_ = true;
    model_.SentTerminate();
    random_.Trace("SIGTERM");
  }
  if (config_.disk_faults && random_.Chance(0.03)) {
    file_limit_ = file_limit_ < 0 ? random_.Pick(0, 16 << 10) : -1;
    files_.LimitFileSize(file_limit_);
    random_.Trace("files may grow to {} bytes", file_limit_);
  }
  if (config_.checkpoints && random_.Chance(0.02)) {
    const int s = config_.shards == 1 ? 0 : static_cast<int>(library_random_.Pick(0, config_.shards - 1));
    Shard& shard = shards_[static_cast<size_t>(s)];
    const bool was_writing = shard.service->checkpoints()->active();
    Status asked;
    asked = shard.service->RequestCheckpoint("the simulation");
    if (!asked.ok()) throw SimulationFailure("RequestCheckpoint: " + asked.ToString());
    if (!was_writing && shard.service->checkpoints()->active() && !config_.disk_faults) {
      // Begun now, between steps: its restore must be the replay as it is.
      shard.snapshot = TakeSnapshot(*shard.replay, shard.service->checkpoints()->path());
    }
  }
}

void Simulator::StepShards(bool all) {
  std::vector<int> stepping;
  if (all || random_.Chance(0.7)) stepping.push_back(0);
  for (int s = 1; s < config_.shards; ++s) {
    if (all || library_random_.Chance(0.7)) stepping.push_back(s);
  }
  if (stepping.empty()) return;
  for (const int s : stepping) StepShard(s);
  ++result_.steps;
  now_ += kStepTime;
  model_.SetNow(now_);
  random_.Stepped();
  for (const int s : stepping) {
    const Shard& shard = shards_[static_cast<size_t>(s)];
    if (random_.tracing()) {
      random_.Trace("stepped{}: next key {}, {}", config_.shards > 1 ? fmt::format(" shard {}", s) : "",
                    shard.replay->items().next_key(), shard.service->DescribeClients());
    }
    model_.CheckReplay(s, *shard.replay, shard.items_changed);
    if (config_.steps.on) {
      step_model_.ThrowIfFailed();
      step_model_.CheckShard(s, *shard.replay, shard.items_changed);
      step_model_.CheckHeld(s, [&shard](int index) { return shard.service->held_adds(index); });
    }
    CheckCheckpoint(s);
  }
}

void Simulator::StepShard(int s) {
  Shard& shard = shards_[static_cast<size_t>(s)];
  bool handled = false;
  const Status stepped = shard.service->Step(&handled);
  if (!stepped.ok()) throw SimulationFailure("Step: " + stepped.ToString());
  // The helper thread's fsyncs and rename end before the next step looks.
  if (shard.service->checkpoints() != nullptr) shard.service->checkpoints()->AwaitFinish();
  timers_->Stepped(s, *shard.service, *shard.replay, now_, terminated_);
  const replay::Replay& replay = shard.replay->items();
  const double total = replay.tree().Total(), min_leaf = replay.tree().Min();
  shard.items_changed = replay.next_key() != shard.next_key || replay.size() != shard.size;
  if (shard.items_changed || total != shard.total || min_leaf != shard.min_leaf) {
    ++versions_[static_cast<size_t>(s)];
    shard.next_key = replay.next_key();
    shard.size = replay.size();
    shard.total = total;
    shard.min_leaf = min_leaf;
  }
}

void Simulator::CheckCheckpoint(int s) {
  Shard& shard = shards_[static_cast<size_t>(s)];
  if (shard.service->checkpoints() == nullptr) return;
  const std::string& path = shard.service->checkpoints()->last_path();
  if (path.empty() || path == shard.last_checked_path) return;
  shard.last_checked_path = path;
  CheckRestoredCheckpoint(config_, s, shard.table_options, shard.transport->client_count(), path, &files_, &model_,
                          config_.steps.on ? &step_model_ : nullptr, &shard.snapshot, &restored_counts_);
}

std::string Simulator::DescribeWaits() const {
  std::string text;
  for (int s = 0; s < config_.shards; ++s) {
    const std::string clients = shards_[static_cast<size_t>(s)].service->DescribeClients();
    text += config_.shards == 1 ? clients : fmt::format("{}shard {}: {}", s == 0 ? "" : "; ", s, clients);
  }
  for (const auto& client : library_) text += "; " + client->Describe();
  return text;
}

void Simulator::CheckEnd() {
  // After SIGTERM the loop goes on, with every client closed, until its final
  // checkpoint is written (done() says so): a bounded number of passes.
  const auto all_done = [this] {
    return std::all_of(shards_.begin(), shards_.end(), [](const Shard& shard) { return shard.service->done(); });
  };
  for (int64_t passes = 0; !all_done(); ++passes) {
    if (passes > kLivenessSteps) {
      throw SimulationFailure(fmt::format("every client closed, but the service is not done after {} passes: {}",
                                          kLivenessSteps, DescribeWaits()));
    }
    StepShards(/*all=*/true);
  }
  for (int client = 0; client < config_.clients(); ++client) {
    for (int s = 0; s < config_.shards; ++s) {
      const int index = links_[static_cast<size_t>(s)].index[static_cast<size_t>(client)];
      LoopbackTransport& transport = *shards_[static_cast<size_t>(s)].transport;
      if (index >= 0 && (!transport.outbox(index).empty() || transport.NextReplyInFlight(index))) {
        throw SimulationFailure(fmt::format("client {}: a reply after its close reply{}", client,
                                            config_.shards > 1 ? fmt::format(" (shard {})", s) : ""));
      }
    }
  }
  for (int s = 0; s < config_.shards; ++s) model_.CheckEnd(s, *shards_[static_cast<size_t>(s)].replay);
  model_.CheckEnd();
}

void Simulator::AbortLibraryClients() {
  for (const auto& client : library_) client->Abort();
}

}  // namespace

SimulationResult RunSimulation(uint64_t seed) { return Simulator(seed).Run(); }

std::string RerunCommand(uint64_t seed) {
  return fmt::format("PERSERVE_SIM_SEED={} build/tests/perserve_sim_tests", seed);
}

}  // namespace perserve::service::simulation
