#include "server/service/simulation/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <deque>
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
#include "service/checkpoint/checkpoint.h"
#include "service/replay_service.h"

namespace perserve::service::simulation {
namespace {

// Once the clients stop working, the services must reach done() within this
// many steps (every client reads all its replies each step).
constexpr int64_t kLivenessSteps = 2000;

// Every configuration's draws: the first two streams' as before, then the
// third's, then the fourth's (step streams), the fifth's (timers), the
// sixth's (tables) and the seventh's (crash-restarts).
SimulationConfig DrawWholeConfig(ScheduleRandom* random, ScheduleRandom* later, ScheduleRandom* library,
                                 ScheduleRandom* steps, ScheduleRandom* timers, ScheduleRandom* tables,
                                 ScheduleRandom* crashes) {
  SimulationConfig config = DrawConfig(random->generator(), later->generator());
  DrawLibraryConfig(library->generator(), &config);
  config.steps = DrawStepConfig(steps->generator(), &config.options.min_size_to_sample);
  DrawTimers(timers->generator(), config.checkpoints, &config.options);
  DrawTables(tables->generator(), &config);
  DrawCrashes(crashes->generator(), &config);
  return config;
}

// The directory every shard checkpoints under (its own shard-<s>-of-<K>), in the simulation's file system.
constexpr const char* kCheckpointDir = "/checkpoints";

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
  std::string restored_path;  // the checkpoint this life of the job restored (crash-restarts)
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
        crash_random_(ScheduleRandom::CrashesSeed(seed)),
        config_(DrawWholeConfig(&random_, &later_random_, &library_random_, &steps_random_, &timers_random_,
                                &tables_random_, &crash_random_)),
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
  // Parts of Start, made again when the job restarts: shard `s`'s
  // transport (its clients' roles and names), the clients, and its service.
  void MakeTransport(int s);
  void MakeClients();
  void MakeService(int s);
  void WorkTick(int tick);
  bool DrainTick();  // true once every client has its close reply
  // The library clients' turns this tick, in a random order.
  void LibraryTick(bool work);
  void SimulatorActs();
  // A tick's steps: each shard steps (the first with 70% odds as it always
  // did, the others drawn from the third stream), or with `all` every one.
  void StepShards(bool all);
  void StepShard(int shard);
  // After shard `s`'s replay may have changed (a step; `replaced`: a restart
  // made it anew): whether its items changed, and its version bumped if they
  // or its tree's total or smallest leaf did.
  void NoteItems(int s, bool replaced);
  void CheckCheckpoint(int shard);
  void CheckEnd();
  // Crash-restarts (config_.crashes; issue 35). As a checkpoint of shard `s`
  // begins, what a restore of it must give: the replay as it is (Snapshot)
  // and the StepModel's shard.
  void CheckpointBegun(int s, const std::string& path);
  // After a work tick: the job crashes now, or at an operation of the file
  // system soon (a crash the next steps run into), once every shard has a
  // complete checkpoint; a crash that came restarts it.
  void MaybeCrash(int tick);
  bool EveryShardRestorable() const;
  // The crash: every client and service gone, the files as the crash left
  // them; then every shard restores its newest complete checkpoint, which
  // must be exactly the replay as that checkpoint began, the models go back
  // to that moment, and new clients join (actors go on from their streams'
  // steps, as the join tells them).
  void CrashAndRestart(bool mid_operation);
  // What the life of the job that ends counted (its clients' replies, its
  // services' deadlines, its timers), into the result.
  void KeepTotals();
  // What waits: every service's clients and every library client's call.
  std::string DescribeWaits() const;
  void AbortLibraryClients();

  ScheduleRandom random_, later_random_, library_random_, steps_random_, timers_random_, tables_random_,
      crash_random_;
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
  ServiceOptions service_options_;  // every shard's service's, but its shard and hooks
  // Crash-restarts: by shard, the checkpoints begun (oldest first) since
  // the newest complete one, and what a restore of each must give.
  struct Begun {
    std::string path;
    Snapshot snapshot;
    StepModel::Saved model;
  };
  std::vector<std::deque<Begun>> begun_;
  // The last of `begun` begun under `path` (a failed checkpoint leaves its number to the next); end() if none.
  static std::deque<Begun>::iterator LastBegun(std::deque<Begun>& begun, const std::string& path) {
    const auto last = std::find_if(begun.rbegin(), begun.rend(), [&](const Begun& b) { return b.path == path; });
    return last == begun.rend() ? begun.end() : std::prev(last.base());
  }
  int run_ = 0;             // the job's life: 1, 2 after each crash-restart
  int crashes_left_ = 0;
  int next_crash_tick_ = 0;  // no crash before this work tick
  int armed_at_ = -1;       // the tick a crash at a file operation was scheduled (files_.CrashBeforeOperation); -1: none
  uint64_t lives_fingerprint_ = 0;  // of the lives before this one
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
    for (int tick = 0; tick < config_.work_ticks; ++tick) WorkTick(tick);
    if (armed_at_ >= 0) {  // a crash scheduled but not come: none any more
      files_.Restart();
      armed_at_ = -1;
    }
    const int64_t drain_began = result_.steps;
    while (!DrainTick()) {
      if (result_.steps - drain_began > kLivenessSteps) {
        throw SimulationFailure(fmt::format("not every client closed within {} steps after they stopped working: {}",
                                            kLivenessSteps, DescribeWaits()));
      }
    }
    CheckEnd();
    KeepTotals();
    result_.batches = counts_.batches;
    result_.exact_batches = counts_.exact_batches;
    result_.lent_sends = counts_.lent_sends;
    result_.blocked_calls = counts_.blocked_calls;
    result_.other_table_batches = counts_.other_table_batches;
    result_.columns_apart += counts_.columns_apart;
    result_.step_counts = step_model_.counts();
    result_.step_counts.Add(restored_counts_);
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
  if (config_.crashes > 0) {  // only then: every other seed keeps its digest
    const uint64_t digest = crash_random_.generator().digest();
    schedule.Update(std::as_bytes(std::span(&digest, 1)));
  }
  result_.schedule = schedule.Finish();
  return result_;
}

void Simulator::Start() {
  const int shards = config_.shards;
  shards_.resize(static_cast<size_t>(shards));
  links_.resize(static_cast<size_t>(shards));
  begun_.resize(static_cast<size_t>(shards));
  crashes_left_ = config_.crashes;
  if (crashes_left_ > 0) next_crash_tick_ = static_cast<int>(crash_random_.Pick(0, config_.work_ticks / 2));
  // Each shard's clients, in client order: its actors and every learner.
  for (int s = 0; s < shards; ++s) {
    ShardLink& link = links_[static_cast<size_t>(s)];
    int next_index = 0;
    for (int client = 0; client < config_.clients(); ++client) {
      const bool talks = !config_.actor(client) || config_.ShardOfActor(client) == s;
      link.index.push_back(talks ? next_index++ : -1);
    }
    MakeTransport(s);
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
  service_options_ = config_.options;
  if (config_.checkpoints) {
    service_options_.checkpoint_dir = kCheckpointDir;
    service_options_.checkpoint_file_system = &files_;
  }
  service_options_.clock = [this] { return now_; };
  service_options_.shards = shards;
  timers_.emplace(service_options_, shards, now_);
  model_.SetNow(now_);
  if (config_.steps.on) {
    step_model_.Start();
    model_.SetStepModel(&step_model_);
  }
  MakeClients();
  // The roles first: a service counts them when it is made.
  for (int s = 0; s < shards; ++s) MakeService(s);
}

void Simulator::MakeTransport(int s) {
  Shard& shard = shards_[static_cast<size_t>(s)];
  ShardLink& link = links_[static_cast<size_t>(s)];
  const auto clients = static_cast<int>(std::count_if(link.index.begin(), link.index.end(), [](int i) { return i >= 0; }));
  shard.transport = std::make_unique<LoopbackTransport>(clients);
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

void Simulator::MakeClients() {
  clients_ = std::make_unique<SimulatedClients>(config_, &random_, &later_random_, &library_random_, &tables_random_,
                                                &model_, &links_, &step_model_, run_);
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
}

void Simulator::MakeService(int s) {
  Shard& shard = shards_[static_cast<size_t>(s)];
  ServiceOptions options = service_options_;
  options.shard = s;
  options.take_signal = [this, s] { return std::exchange(shards_[static_cast<size_t>(s)].pending_signal, 0); };
  if (config_.crashes > 0) {
    options.checkpoint_begun = [this, s](const std::string& path) { CheckpointBegun(s, path); };
  }
  shard.service = std::make_unique<ReplayService>(shard.replay.get(), shard.transport.get(), options);
}

void Simulator::WorkTick(int tick) {
  for (int64_t actions = random_.Pick(0, 3); actions > 0; --actions) {
    clients_->Act(static_cast<int>(random_.Pick(0, raw_clients() - 1)));
  }
  for (int client = 0; client < raw_clients(); ++client) clients_->Tick(client);
  LibraryTick(/*work=*/true);
  SimulatorActs();
  StepShards(/*all=*/false);
  if (config_.crashes > 0) MaybeCrash(tick);
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
    if (armed_at_ >= 0 && !files_.down()) {  // no crash after SIGTERM (the job is ending)
      files_.Restart();
      armed_at_ = -1;
    }
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
  for (const Shard& shard : shards_) {
    if (!shard.transport->changed_in_flight().empty()) Fail(shard.transport->changed_in_flight());
  }
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
      step_model_.CheckHeld(
          s, [&shard](int index) { return shard.service->held_adds(index); }, shard.service->rows_pinned());
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
  NoteItems(s, /*replaced=*/false);
}

void Simulator::NoteItems(int s, bool replaced) {
  Shard& shard = shards_[static_cast<size_t>(s)];
  const replay::Replay& replay = shard.replay->items();
  const double total = replay.tree().Total(), min_leaf = replay.tree().Min();
  shard.items_changed = replaced || replay.next_key() != shard.next_key || replay.size() != shard.size;
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
  // A crash came in this step (its files read nothing now): the restart restores the newest complete one.
  if (shard.service->checkpoints() == nullptr || files_.down()) return;
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

void Simulator::CheckpointBegun(int s, const std::string& path) {
  Shard& shard = shards_[static_cast<size_t>(s)];
  std::deque<Begun>& begun = begun_[static_cast<size_t>(s)];
  // What began before the newest complete checkpoint cannot be the newest on disk any more.
  const auto complete = LastBegun(begun, shard.service->checkpoints()->last_path());
  if (complete != begun.end()) begun.erase(begun.begin(), complete);
  begun.push_back(
      Begun{path, TakeSnapshot(*shard.replay, path), config_.steps.on ? step_model_.Save(s) : StepModel::Saved{}});
  random_.Trace("checkpoint {} begun{}", path, config_.shards > 1 ? fmt::format(" (shard {})", s) : "");
}

bool Simulator::EveryShardRestorable() const {
  return std::all_of(shards_.begin(), shards_.end(), [](const Shard& shard) {
    return !shard.service->checkpoints()->last_path().empty() || !shard.restored_path.empty();
  });
}

void Simulator::MaybeCrash(int tick) {
  if (files_.down()) return CrashAndRestart(/*mid_operation=*/true);  // the crash scheduled came in a step
  if (crashes_left_ == 0 || terminated_ || tick < next_crash_tick_ || !EveryShardRestorable()) return;
  if (armed_at_ < 0 && crash_random_.Chance(0.5)) {
    // At the k-th operation of the file system from now: inside a checkpoint being written (or the next).
    const int64_t k = crash_random_.Pick(1, 60);
    const auto kind = crash_random_.Chance(0.5) ? checkpoint_test::MemoryFileSystem::CrashKind::kMachine
                                                : checkpoint_test::MemoryFileSystem::CrashKind::kProcess;
    files_.CrashBeforeOperation(k, kind);
    armed_at_ = tick;
    random_.Trace("crash ({}) at the {}-th operation of the file system from now",
                  kind == checkpoint_test::MemoryFileSystem::CrashKind::kMachine ? "machine" : "process", k);
    return;
  }
  // Between two steps, now (or one scheduled that has not come for a while).
  if (armed_at_ >= 0 && tick - armed_at_ < 60) return;
  CrashAndRestart(/*mid_operation=*/false);
}

void Simulator::CrashAndRestart(bool mid_operation) {
  if (config_.steps.on) step_model_.ThrowIfFailed();
  KeepTotals();
  AbortLibraryClients();
  library_.clear();
  clients_.reset();
  if (!files_.down()) {
    files_.CrashNow(crash_random_.Chance(0.5) ? checkpoint_test::MemoryFileSystem::CrashKind::kMachine
                                              : checkpoint_test::MemoryFileSystem::CrashKind::kProcess);
  }
  // Its checkpoint writer's cleanup fails: the files stay as the crash left them.
  for (Shard& shard : shards_) shard.service.reset();
  files_.Restart();
  armed_at_ = -1;
  --crashes_left_;
  ++run_;
  world_.run = run_;
  ++result_.restarts;
  result_.restarts_mid_operation += mid_operation;
  random_.Trace("the job crashed{}; life {} restarts from the checkpoints", mid_operation ? " (mid-operation)" : "",
                run_);
  // Each shard restores its newest complete checkpoint (as `--restore DIR` does), which must be exactly the
  // replay as that checkpoint began; the StepModel's shard goes back to that moment.
  std::vector<uint64_t> next_keys;
  std::vector<std::pair<uint64_t, int64_t>> transitions;  // restored (transitions: the ReferenceModel's to know)
  std::vector<CheckpointState> states(shards_.size());
  for (int s = 0; s < config_.shards; ++s) {
    Shard& shard = shards_[static_cast<size_t>(s)];
    shard.replay.reset();
    MakeTransport(s);
    Status status = CreateShardReplay(config_, shard.transport->client_count(), shard.table_options, &shard.replay);
    std::string loaded;
    if (status.ok()) {
      status = LoadCheckpoint(kCheckpointDir, s, config_.shards, shard.replay.get(), &states[static_cast<size_t>(s)],
                              &loaded, &files_);
    }
    const std::string which = config_.shards > 1 ? fmt::format("shard {}", s) : "the replay";
    if (!status.ok()) Fail(fmt::format("restarting {} after the crash: {}", which, status.ToString()));
    std::deque<Begun>& begun = begun_[static_cast<size_t>(s)];
    const auto found = LastBegun(begun, loaded);
    Expect(found != begun.end(), [&] {
      return fmt::format("restarting {} after the crash restored {}, which is not a checkpoint it began since its "
                         "newest complete one ({})",
                         which, loaded, begun.empty() ? "none" : begun.front().path);
    });
    const Snapshot restored = TakeSnapshot(*shard.replay, loaded);
    Expect(restored == found->snapshot, [&] {
      return fmt::format("restarting {} after the crash: {} does not restore the replay as it was when it began "
                         "(steps {} .. {} restored, {} .. {} then)",
                         which, loaded, restored.oldest_step, restored.next_step, found->snapshot.oldest_step,
                         found->snapshot.next_step);
    });
    if (config_.steps.on) step_model_.RollBack(s, found->model);
    begun.erase(begun.begin(), found);
    begun.erase(std::next(begun.begin()), begun.end());  // begun after it: not complete, gone
    shard.restored_path = loaded;
    shard.last_checked_path = loaded;
    shard.snapshot.reset();
    shard.pending_signal = 0;
    links_[static_cast<size_t>(s)].replay = &shard.replay->items();
    links_[static_cast<size_t>(s)].table = shard.replay.get();
    next_keys.push_back(shard.replay->items().next_key());
    if (!config_.steps.on) {
      for (const auto& held : HeldTransitions(config_, s, *shard.replay, loaded)) transitions.push_back(held);
    }
  }
  // As the join tells each actor: the steps its restored shard holds of its stream.
  const auto stream_steps = [this](int client, int s) { return links_[static_cast<size_t>(s)].StreamSteps(client); };
  model_.Restarted(next_keys, stream_steps, transitions);
  if (config_.steps.on) step_model_.Restarted();
  timers_.emplace(service_options_, config_.shards, now_);
  MakeClients();
  for (int s = 0; s < config_.shards; ++s) {
    Shard& shard = shards_[static_cast<size_t>(s)];
    MakeService(s);
    shard.service->Restore(states[static_cast<size_t>(s)]);
    // The restored replay is the models' as they went back: check it now, as after a step.
    model_.CheckReplay(s, *shard.replay, /*changed=*/true);
    if (config_.steps.on) step_model_.CheckShard(s, *shard.replay, /*changed=*/true);
    NoteItems(s, /*replaced=*/true);
  }
  if (crashes_left_ > 0) {
    next_crash_tick_ += static_cast<int>(crash_random_.Pick(10, std::max(10, config_.work_ticks / 2)));
  }
}

void Simulator::KeepTotals() {
  result_.replies += clients_->replies();
  result_.columns_apart += clients_->columns_apart();
  result_.columns_first += clients_->columns_first();
  for (const Shard& shard : shards_) result_.deadlines_exceeded += shard.service->counters().deadlines_exceeded;
  result_.periodic_checkpoints += timers_->periodic_checkpoints();
  result_.stats_lines += timers_->stats_lines();
  // This life's: its raw clients' replies, then its library clients' (one life: as it always was).
  uint64_t life = clients_->fingerprint();
  if (!library_.empty()) {
    Hash64 hash;
    hash.Update(std::as_bytes(std::span(&life, 1)));
    for (const auto& client : library_) {
      const uint64_t fingerprint = client->fingerprint();
      hash.Update(std::as_bytes(std::span(&fingerprint, 1)));
    }
    life = hash.Finish();
  }
  if (run_ == 0) {
    lives_fingerprint_ = life;
  } else {
    Hash64 hash;
    hash.Update(std::as_bytes(std::span(&lives_fingerprint_, 1)));
    hash.Update(std::as_bytes(std::span(&life, 1)));
    lives_fingerprint_ = hash.Finish();
  }
  result_.fingerprint = lives_fingerprint_;
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
