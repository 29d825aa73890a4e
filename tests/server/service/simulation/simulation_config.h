// What one seed's run looks like: the service's options and the clients'
// habits, all drawn from the run's generator before anything runs, so a seed
// names a whole configuration as well as a schedule.
#pragma once

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "replay/step_replay.h"
#include "server/service/simulation/portable_random.h"
#include "server/service/simulation/self_checking_rows.h"
#include "server/service/simulation/step_config.h"
#include "service/replay_service.h"

namespace perserve::service::simulation {

// The share of seeds that draw the library's features (DrawLibraryConfig).
inline constexpr double kLibraryConfigShare = 0.5;

struct SimulationConfig {
  int actors = 2;
  int learners = 1;
  int64_t capacity = 64;
  int64_t pad_bytes = 16;
  ServiceOptions options;
  bool drop_bad_priorities = false;
  double priority_eps = 0.0;
  bool rows_in_place = false;    // sample replies sent from the store, rows pinned until delivered
  size_t eager_limit = 0;        // sends up to this many bytes complete at once
  bool checkpoints = false;      // a checkpoint directory: requests by clients and by the simulator
  bool disk_faults = false;      // spells of a file size limit (EFBIG, as RLIMIT_FSIZE): checkpoint writes fail
  bool signals = false;          // SIGUSR1 now and then, one SIGTERM perhaps
  int work_ticks = 200;          // ticks in which clients make requests; then they close
  int max_adds_in_flight = 4;    // an actor's unacknowledged adds (its back-pressure)
  int max_requests_waiting = 4;  // a learner's unanswered samples
  // Learners also send shard samples (one shard: the learner's share of a
  // sample over shards, and probes of the shard's state).
  bool shard_samples = false;

  // Drawn from a third stream (DrawLibraryConfig): several shards, and
  // clients of the real client library. Clients are numbered: the raw
  // actors, the raw learners, then the library's actors and learners.
  int shards = 1;                       // one ReplayService (replay, transport) a shard
  int library_actors = 0;               // ActorClient over a SimulatedConnection
  int library_learners = 0;             // LearnerClient (its ShardSampler over several shards)
  bool lend_buffers = false;            // library actors add through AddBorrowed (else Add)
  int64_t columns_apart_min_bytes = 0;  // their ClientOptions'
  int library_max_in_flight = 4;        // their ClientOptions::max_in_flight
  int prefetch = 0;                     // the library learners' ClientOptions'
  bool exact_shard_totals = false;      // theirs
  bool awaited_samples = false;         // raw learners mark samples awaited (rows sent from the store, pinned)

  // Drawn from a fourth stream (DrawStepConfig): services of step streams.
  StepStreamsConfig steps;

  // Drawn from a seventh stream (DrawCrashes): the job crashes (a machine
  // or the processes) up to this many times while its clients work, and
  // restarts from each shard's newest complete checkpoint.
  int crashes = 0;

  // One sampled item's bytes: a self-checking row, or the step layout's (of `table`).
  int64_t RowBytes(int table = 0) const {
    return steps.on ? steps.tables[static_cast<size_t>(table)].sample_schema.ItemBytes() : 8 + pad_bytes;
  }
  // The tables a service holds: one of transitions, or steps.tables.
  int tables() const { return steps.on ? static_cast<int>(steps.tables.size()) : 1; }
  int clients() const { return actors + learners + library_actors + library_learners; }
  bool library(int client) const { return client >= actors + learners; }
  bool actor(int client) const {
    return client < actors || (client >= actors + learners && client < actors + learners + library_actors);
  }
  // The shard an actor adds to: dealt round-robin, raw actors first, as the
  // join deals actor ranks to the servers (docs/shards.md).
  int ShardOfActor(int client) const { return (client < actors ? client : client - learners) % shards; }

  std::string Describe() const {
    return fmt::format(
        "{} actors, {} learners, capacity {}, row {} bytes, min size {}, rate limiter {} (buffer {}), "
        "{} messages a pass, zero copy {}, eager limit {}, checkpoints {}{}, signals {}, drop bad priorities {}, "
        "eps {}, max deferred adds {} samples {}, unread allowance {}, {} work ticks, shard samples {}{}",
        actors, learners, capacity, 8 + pad_bytes, options.min_size_to_sample, options.samples_per_insert,
        options.error_buffer, options.messages_per_client_pass, rows_in_place, eager_limit, checkpoints,
        disk_faults ? " (failing)" : "", signals, drop_bad_priorities, priority_eps, options.max_deferred_adds,
        options.max_deferred_samples, options.max_unread_sample_replies, work_ticks, shard_samples, DescribeLibrary()) +
           steps.Describe() + (crashes > 0 ? fmt::format(", crash-restarts up to {}", crashes) : "");
  }
  std::string DescribeLibrary() const {
    if (shards == 1 && library_actors + library_learners == 0 && !awaited_samples) return "";
    return fmt::format(
        "; {} shards, library actors {} ({}, columns apart from {} bytes, {} in flight), library learners {} "
        "(prefetch {}, exact shard totals {}), awaited raw samples {}",
        shards, library_actors, lend_buffers ? "AddBorrowed" : "Add", columns_apart_min_bytes, library_max_in_flight,
        library_learners, prefetch, exact_shard_totals, awaited_samples);
  }
};

// A shard's tables (every server is a StepReplay): of transitions (each
// step a self-checking row and the item over itself: a ring of the seed's
// capacity, as many items, one table) or of the seed's step streams (its
// ring; its tables, steps.tables, the default one first), with a stream
// per client index and each table's item options `items` (capacity, alpha,
// seed, priority policy, sampler, remover, max_times_sampled), by table.
inline Status CreateShardReplay(const SimulationConfig& config, int streams,
                                std::span<const replay::ReplayOptions> items,
                                std::unique_ptr<replay::StepReplay>* out) {
  if (!config.steps.on) {
    replay::StepOptions options;
    options.kind = replay::StepOptions::Kind::kTransition;
    options.step_capacity = config.capacity;
    options.streams = streams;
    return replay::StepReplay::Create(options, items[0], SelfCheckingSchema(config.pad_bytes), out);
  }
  std::vector<replay::TableConfig> tables;
  for (size_t t = 0; t < config.steps.tables.size(); ++t) {
    const SimTable& table = config.steps.tables[t];
    replay::TableConfig made{table.name, t == 0 ? config.steps.options : table.layout, items[t]};
    made.layout.streams = streams;
    tables.push_back(std::move(made));
  }
  return replay::StepReplay::Create(std::move(tables), config.steps.step_schema, out);
}

// `later`: the stream of features added after seeds were pinned as
// regression tests (RegressionSeeds), so those seeds keep their schedules.
inline SimulationConfig DrawConfig(PortableRandom& rng, PortableRandom& later) {
  auto pick = [&rng](int64_t lo, int64_t hi) { return rng.Int(lo, hi); };
  auto chance = [&rng](double p) { return rng.Chance(p); };
  SimulationConfig config;
  config.actors = static_cast<int>(pick(1, 3));
  config.learners = static_cast<int>(pick(1, 2));
  config.capacity = int64_t{16} << pick(0, 3);
  config.pad_bytes = pick(1, 40);
  ServiceOptions& options = config.options;
  options.stats_interval_seconds = 0;  // none unless the timers' stream draws them (service_timers.h)
  options.min_size_to_sample = pick(1, config.capacity / 2);
  options.max_sample_batch = 64;
  options.messages_per_client_pass = static_cast<int>(pick(1, 4));
  options.bytes_per_client_pass = chance(0.3) ? pick(64, 2048) : int64_t{1} << 20;
  options.max_unread_sample_replies = static_cast<int>(pick(1, 4));
  options.max_unread_reply_bytes = chance(0.3) ? pick(512, 8192) : int64_t{256} << 20;
  options.max_deferred_samples = static_cast<int>(pick(1, 6));
  options.max_deferred_adds = static_cast<int>(pick(1, 8));
  if (chance(0.5)) {
    options.samples_per_insert = std::array{0.5, 1.0, 2.0, 4.0}[pick(0, 3)];
    options.error_buffer = static_cast<double>(pick(0, 3 * config.capacity));
  }
  config.rows_in_place = chance(0.5);
  options.zero_copy_min_row_bytes = config.rows_in_place ? 0 : -1;
  config.eager_limit = std::array<size_t, 3>{0, 256, size_t{1} << 20}[pick(0, 2)];
  config.checkpoints = chance(0.4);
  config.disk_faults = config.checkpoints && chance(0.4);
  options.checkpoint_slice = std::chrono::microseconds(0);  // one slice a pass, whatever the clock says
  config.signals = chance(0.2);
  config.drop_bad_priorities = chance(0.5);
  config.priority_eps = chance(0.5) ? 1e-6 : 0.0;
  config.work_ticks = static_cast<int>(pick(50, 400));
  config.max_adds_in_flight = static_cast<int>(pick(1, 6));
  config.max_requests_waiting = static_cast<int>(pick(1, 6));
  config.shard_samples = later.Chance(0.5);
  return config;
}

// The features added with the client library in the simulation (issue 24):
// several shards, library clients, awaited raw samples. From a third stream
// (`library`), so every seed that draws none of them runs exactly as before
// (the first two streams untouched); about half the seeds draw them.
inline void DrawLibraryConfig(PortableRandom& library, SimulationConfig* config) {
  auto pick = [&library](int64_t lo, int64_t hi) { return library.Int(lo, hi); };
  auto chance = [&library](double p) { return library.Chance(p); };
  if (!chance(kLibraryConfigShare)) return;
  config->shards = chance(0.6) ? static_cast<int>(pick(2, 3)) : 1;
  config->library_actors = static_cast<int>(pick(0, 2));
  config->library_learners = static_cast<int>(pick(config->shards > 1 ? 1 : 0, 2));
  if (config->library_actors + config->library_learners == 0) config->library_actors = 1;
  config->lend_buffers = chance(0.8);
  config->columns_apart_min_bytes = std::array<int64_t, 4>{0, 0, 200, -1}[pick(0, 3)];
  config->library_max_in_flight = static_cast<int>(pick(1, 4));
  config->prefetch = static_cast<int>(pick(0, 3));
  config->exact_shard_totals = chance(0.4);
  config->awaited_samples = chance(0.5);
}

// One table beside the default one (DrawTables), `index` 1 or 2: its layout
// over the ring `steps` has (n-step or sequences, stacked or not, perhaps
// an item column of its own), shrunk until its items fit the ring; its
// sampler, remover, max_times_sampled, capacity and rate limiter.
inline SimTable DrawTable(PortableRandom& rng, const StepStreamsConfig& steps, int index) {
  using Kind = replay::StepOptions::Kind;
  SimTable table;
  table.name = fmt::format("t{}", index);
  replay::StepOptions& o = table.layout;
  o.step_capacity = steps.options.step_capacity;
  o.streams = 1;  // for StepSchemas; each shard's own at its start
  const int64_t ring = o.step_capacity;
  const int depth = static_cast<int>(rng.Int(1, 3));
  if (rng.Chance(0.5)) {
    o.kind = Kind::kNStep;
    o.n_step = static_cast<int>(rng.Int(1, 3));
    o.discount = rng.Chance(0.3) ? 1.0 : rng.Real(0.0, 1.0);
    if (rng.Chance(0.6)) o.stacks.emplace_back("obs", depth);
  } else {
    o.kind = Kind::kSequence;
    o.sequence_length = static_cast<int>(rng.Int(1, 4));
    o.sequence_period = static_cast<int>(rng.Int(1, o.sequence_length));
    if (rng.Chance(0.5)) o.stacks.emplace_back("obs", depth);
  }
  if (rng.Chance(0.3)) o.item_columns.push_back(Column{"tag", DType::kUInt8, {3}});
  const auto k = [&o] { return o.stacks.empty() ? 1 : o.stacks.front().second; };
  const auto span = [&o, &k] { return o.kind == Kind::kNStep ? o.n_step + k() : o.sequence_length + k() - 1; };
  while (span() > ring) {  // the ring of a sequence of 1 unstacked holds at least one step
    if (k() > 1) {
      --o.stacks.front().second;
    } else if (o.kind == Kind::kNStep && o.n_step > 1) {
      --o.n_step;
    } else if (o.kind == Kind::kNStep) {
      o.kind = Kind::kSequence;
      o.sequence_length = o.sequence_period = 1;
      o.stacks.clear();
    } else {
      --o.sequence_length;
      o.sequence_period = std::min(o.sequence_period, o.sequence_length);
    }
  }
  replay::ReplayOptions& items = table.items;
  items.capacity = rng.Int(2, 24);
  items.sampler = static_cast<perserve::table::SelectorKind>(rng.Int(0, 5));
  items.remover = rng.Chance(0.4) ? replay::RemoverKind::kLowestPriorityFirst : replay::RemoverKind::kOldestFirst;
  items.max_times_sampled = std::array<int64_t, 6>{0, 0, 1, 1, 2, 3}[static_cast<size_t>(rng.Int(0, 5))];
  items.alpha = rng.Real(0.0, 1.0);
  items.seed = rng.Bits();
  table.limiter.min_size_to_sample = rng.Int(1, 3);
  if (rng.Chance(0.3)) {
    table.limiter.samples_per_insert = std::array{0.5, 1.0, 2.0}[static_cast<size_t>(rng.Int(0, 2))];
    table.limiter.error_buffer = static_cast<double>(rng.Int(0, 3 * items.capacity));
  }
  o.frames_first = rng.Chance(0.5);
  const Status made = replay::StepSchemas(o, steps.step_schema, &table.sample_schema, &table.stored_schema);
  if (!made.ok()) throw std::logic_error("the simulation drew a table StepSchemas refuses: " + made.ToString());
  return table;
}

// Issue 34's tables, from a sixth stream (ScheduleRandom::TablesSeed), so
// every seed that draws none runs exactly as before. A service of step
// streams holds its default table (the seed's layout and capacity,
// prioritized, the seed's rate limiter) and, in a share of the seeds, one
// or two tables beside it (DrawTable); then the service's minimum sizes
// and rate limiters by table (ServiceOptions::tables).
inline void DrawTables(PortableRandom& rng, SimulationConfig* config) {
  StepStreamsConfig& steps = config->steps;
  if (!steps.on) return;
  ServiceOptions& options = config->options;
  SimTable first;
  first.layout = steps.options;
  first.items.capacity = config->capacity;
  first.limiter = RateLimiterOptions{options.samples_per_insert, options.error_buffer, options.min_size_to_sample};
  first.sample_schema = steps.sample_schema;
  first.stored_schema = steps.stored_schema;
  steps.tables = {first};
  if (rng.Chance(kTablesShare)) {
    for (int t = 1, extra = static_cast<int>(rng.Int(1, 2)); t <= extra; ++t) {
      steps.tables.push_back(DrawTable(rng, steps, t));
    }
    // The library's learners block in a sample of one table. A rate limiter
    // holds every append that gives its table items while its learners are
    // behind: with several tables, one that no open learner samples holds
    // them for good (as Reverb's does; the server says what waits), and the
    // learner blocked in a sample of another table, waiting for those
    // items, never returns. So with them no table has one.
    if (config->library_learners > 0) {
      for (SimTable& table : steps.tables) table.limiter.samples_per_insert = table.limiter.error_buffer = 0.0;
      options.samples_per_insert = options.error_buffer = 0.0;
    }
  }
  options.tables.clear();
  if (steps.tables.size() > 1) {
    for (const SimTable& table : steps.tables) options.tables.push_back(table.limiter);
  }
}

// Issue 35's crash-restarts, from a seventh stream (CrashesSeed): seeds
// with checkpoints, in a share of them one or two.
inline void DrawCrashes(PortableRandom& rng, SimulationConfig* config) {
  if (!config->checkpoints) return;
  if (rng.Chance(0.6)) config->crashes = static_cast<int>(rng.Int(1, 2));
}

}  // namespace perserve::service::simulation
