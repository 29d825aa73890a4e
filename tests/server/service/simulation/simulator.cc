#include "server/service/simulation/simulator.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "replay/replay.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/schedule_random.h"
#include "server/service/simulation/self_checking_rows.h"
#include "server/service/simulation/simulated_clients.h"
#include "server/service/simulation/simulation_config.h"
#include "service/checkpoint.h"
#include "service/loopback_transport.h"
#include "service/replay_service.h"

namespace perserve::service::simulation {
namespace {

namespace fs = std::filesystem;

// Once the clients stop working, the service must reach done() within this
// many steps (every client reads all its replies each step).
constexpr int64_t kLivenessSteps = 2000;

// What a replay holds, as a checkpoint keeps it: a checkpoint begun between
// two steps must restore the replay's snapshot then.
struct Snapshot {
  std::string path;  // the checkpoint's
  uint64_t oldest_key = 0, next_key = 0;
  std::vector<std::byte> rows;  // every held item, oldest key first, column after column
  std::vector<double> leaves;
  bool operator==(const Snapshot&) const = default;
};

Snapshot TakeSnapshot(const replay::Replay& replay, std::string path) {
  Snapshot snapshot{std::move(path), replay.oldest_key(), replay.next_key(), {}, {}};
  std::vector<int64_t> slots;
  for (uint64_t key = snapshot.oldest_key; key < snapshot.next_key; ++key) {
    slots.push_back(static_cast<int64_t>(key % static_cast<uint64_t>(replay.capacity())));
  }
  snapshot.rows.resize(slots.size() * static_cast<size_t>(replay.store().schema().ItemBytes()));
  snapshot.leaves.resize(slots.size());
  replay.store().Gather(slots, snapshot.rows);
  if (!replay.tree().Get(slots, snapshot.leaves).ok()) throw SimulationFailure("reading a tree's leaves");
  return snapshot;
}

class Simulator {
 public:
  explicit Simulator(uint64_t seed)
      : random_(seed),
        later_random_(ScheduleRandom::LaterFeaturesSeed(seed)),
        config_(DrawConfig(random_.generator(), later_random_.generator())),
        model_(config_, config_.actors + config_.learners) {}
  ~Simulator() {
    service_.reset();  // its checkpoint writer (and helper thread) first, then its directory
    std::error_code error;
    if (!dir_.empty()) fs::remove_all(dir_, error);
  }

  SimulationResult Run();

 private:
  int clients() const { return config_.actors + config_.learners; }

  void Start();
  void WorkTick();
  bool DrainTick();  // true once every client has its close reply
  void SimulatorActs();
  void Step();
  // Runs `fn` under the spell's file size limit, if one is on.
  template <class Fn>
  void WithFileLimit(Fn fn);
  void CheckCheckpoint();
  void CheckRestore(const std::string& path);
  void CheckEnd();

  ScheduleRandom random_, later_random_;
  const SimulationConfig config_;
  ReferenceModel model_;
  fs::path dir_;
  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<replay::Replay> replay_;
  std::unique_ptr<SimulatedClients> clients_;
  std::unique_ptr<ReplayService> service_;
  replay::ReplayOptions replay_options_;
  int pending_signal_ = 0;
  // The service's clock: deadlines and SIGTERM's grace fire at the same step of every run.
  static constexpr std::chrono::milliseconds kStepTime{1};
  std::chrono::steady_clock::time_point now_ = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  bool terminated_ = false;
  int64_t file_limit_ = -1;  // bytes a file may grow to during a spell of faults; < 0: none
  std::optional<Snapshot> snapshot_;
  std::string last_checked_path_;
  SimulationResult result_;
};

SimulationResult Simulator::Run() {
  result_.config = config_.Describe();
  try {
    Start();
    for (int tick = 0; tick < config_.work_ticks; ++tick) WorkTick();
    const int64_t drain_began = result_.steps;
    while (!DrainTick()) {
      if (result_.steps - drain_began > kLivenessSteps) {
        throw SimulationFailure(fmt::format("not every client closed within {} steps after they stopped working: {}",
                                            kLivenessSteps, service_->DescribeClients()));
      }
    }
    CheckEnd();
    result_.replies = clients_->replies();
    result_.deadlines_exceeded = service_->counters().deadlines_exceeded;
    result_.fingerprint = clients_->fingerprint();
  } catch (const SimulationFailure& failure) {
    result_.passed = false;
    result_.failure = fmt::format("at step {}: {}", result_.steps, failure.what());
  }
  return result_;
}

void Simulator::Start() {
  transport_ = std::make_unique<LoopbackTransport>(clients());
  transport_->SetEagerLimit(config_.eager_limit);
  transport_->SendRowsInPlace(config_.rows_in_place);
  replay_options_.capacity = config_.capacity;
  replay_options_.alpha = random_.Uniform(0.0, 1.0);
  replay_options_.device = tree::Device::kCpu;
  replay_options_.seed = random_.generator()();
  replay_options_.priority_eps = config_.priority_eps;
  replay_options_.drop_bad_priorities = config_.drop_bad_priorities;
  replay_options_.max_priority_from_adds = random_.Chance(0.5);
  const Status created = replay::Replay::Create(replay_options_, SelfCheckingSchema(config_.pad_bytes), &replay_);
  if (!created.ok()) throw SimulationFailure("the replay: " + created.ToString());
  ServiceOptions options = config_.options;
  if (config_.checkpoints) {
    std::string pattern =
        (fs::path(fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path()) / "perserve-sim-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw SimulationFailure("mkdtemp failed");
    dir_ = pattern;
    options.checkpoint_dir = dir_.string();
  }
  options.take_signal = [this] { return std::exchange(pending_signal_, 0); };
  options.clock = [this] { return now_; };
  model_.SetNow(now_);
  // The roles first: the service counts them when it is made.
  clients_ =
      std::make_unique<SimulatedClients>(config_, &random_, &later_random_, &model_, transport_.get(), replay_.get());
  service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
}

void Simulator::WorkTick() {
  for (int64_t actions = random_.Pick(0, 3); actions > 0; --actions) {
    clients_->Act(static_cast<int>(random_.Pick(0, clients() - 1)));
  }
  for (int client = 0; client < clients(); ++client) clients_->Tick(client);
  SimulatorActs();
  if (random_.Chance(0.7)) Step();
}

bool Simulator::DrainTick() {
  bool all_closed = true;
  for (int client = 0; client < clients(); ++client) {
    clients_->Finish(client);
    all_closed &= model_.closed(client);
  }
  if (all_closed) return true;
  Step();
  return false;
}

void Simulator::SimulatorActs() {
  if (config_.signals && random_.Chance(0.01)) {
    pending_signal_ = SIGUSR1;
    random_.Trace("SIGUSR1");
  }
  if (config_.signals && !terminated_ && random_.Chance(0.002)) {
    pending_signal_ = SIGTERM;
    terminated_ = true;
    model_.SentTerminate();
    random_.Trace("SIGTERM");
  }
  if (config_.disk_faults && random_.Chance(0.03)) {
    file_limit_ = file_limit_ < 0 ? random_.Pick(0, 16 << 10) : -1;
    random_.Trace("files may grow to {} bytes", file_limit_);
  }
  if (config_.checkpoints && random_.Chance(0.02)) {
    const bool was_writing = service_->checkpoints()->active();
    Status asked;
    WithFileLimit([&] { asked = service_->RequestCheckpoint("the simulation"); });
    if (!asked.ok()) throw SimulationFailure("RequestCheckpoint: " + asked.ToString());
    if (!was_writing && service_->checkpoints()->active() && !config_.disk_faults) {
      // Begun now, between steps: its restore must be the replay as it is.
      snapshot_ = TakeSnapshot(*replay_, service_->checkpoints()->path());
    }
  }
}

template <class Fn>
void Simulator::WithFileLimit(Fn fn) {
  if (file_limit_ < 0) return fn();
  // Restored however fn ends (a failure throws): later seeds, and the test's own output, write freely.
  struct LimitedWrites {
    explicit LimitedWrites(int64_t bytes) {
      ::getrlimit(RLIMIT_FSIZE, &before);
      struct rlimit limited = before;
      limited.rlim_cur = static_cast<rlim_t>(bytes);
      ::setrlimit(RLIMIT_FSIZE, &limited);
    }
    ~LimitedWrites() { ::setrlimit(RLIMIT_FSIZE, &before); }
    struct rlimit before {};
  } limited(file_limit_);
  fn();
}

void Simulator::Step() {
  WithFileLimit([this] {
    bool handled = false;
    const Status stepped = service_->Step(&handled);
    if (!stepped.ok()) throw SimulationFailure("Step: " + stepped.ToString());
    // The helper thread's fsyncs and rename end before the next step looks.
    if (service_->checkpoints() != nullptr) service_->checkpoints()->AwaitFinish();
  });
  ++result_.steps;
  now_ += kStepTime;
  model_.SetNow(now_);
  random_.Stepped();
  if (random_.tracing()) random_.Trace("stepped: next key {}, {}", replay_->next_key(), service_->DescribeClients());
  model_.CheckReplay(*replay_);
  CheckCheckpoint();
}

void Simulator::CheckCheckpoint() {
  if (service_->checkpoints() == nullptr) return;
  const std::string& path = service_->checkpoints()->last_path();
  if (path.empty() || path == last_checked_path_) return;
  last_checked_path_ = path;
  CheckRestore(path);
}

void Simulator::CheckRestore(const std::string& path) {
  std::unique_ptr<replay::Replay> restored;
  Status status = replay::Replay::Create(replay_options_, SelfCheckingSchema(config_.pad_bytes), &restored);
  CheckpointState state;
  std::string loaded;
  if (status.ok()) status = LoadCheckpoint(path, 0, 1, restored.get(), &state, &loaded);
  if (!status.ok()) throw SimulationFailure(fmt::format("restoring {}: {}", path, status.ToString()));
  const Snapshot held = TakeSnapshot(*restored, path);
  const int64_t count = static_cast<int64_t>(held.leaves.size());
  for (int64_t i = 0; i < count; ++i) {
    int64_t id = 0;
    if (!ReadRow(held.rows, count, i, config_.pad_bytes, &id)) {
      throw SimulationFailure(fmt::format("{}: the restored row of key {} is torn", path, held.oldest_key + i));
    }
    model_.ObservedItem(held.oldest_key + i, id, "a restore of " + path);
    if (!(held.leaves[i] > 0.0)) throw SimulationFailure(fmt::format("{}: restored leaf {}", path, held.leaves[i]));
  }
  if (snapshot_ && snapshot_->path == path) {
    if (!(held == *snapshot_)) {
      throw SimulationFailure(
          fmt::format("{} does not restore the replay as it was when it began (keys {} .. {} "
                      "restored, {} .. {} then, or other rows or leaves)",
                      path, held.oldest_key, held.next_key, snapshot_->oldest_key, snapshot_->next_key));
    }
    snapshot_.reset();
  }
}

void Simulator::CheckEnd() {
  // After SIGTERM the loop goes on, with every client closed, until its final
  // checkpoint is written (done() says so): a bounded number of passes.
  for (int64_t passes = 0; !service_->done(); ++passes) {
    if (passes > kLivenessSteps) {
      throw SimulationFailure(fmt::format("every client closed, but the service is not done after {} passes: {}",
                                          kLivenessSteps, service_->DescribeClients()));
    }
    Step();
  }
  for (int client = 0; client < clients(); ++client) {
    if (!transport_->outbox(client).empty() || transport_->NextReplyInFlight(client)) {
      throw SimulationFailure(fmt::format("client {}: a reply after its close reply", client));
    }
  }
  model_.CheckEnd(*replay_);
}

}  // namespace

SimulationResult RunSimulation(uint64_t seed) { return Simulator(seed).Run(); }

std::string RerunCommand(uint64_t seed) {
  return fmt::format("PERSERVE_SIM_SEED={} build/tests/perserve_sim_tests", seed);
}

}  // namespace perserve::service::simulation
