// What one seed's run looks like: the service's options and the clients'
// habits, all drawn from the run's generator before anything runs, so a seed
// names a whole configuration as well as a schedule.
#pragma once

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

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

  // One sampled item's bytes: a self-checking row, or the step layout's.
  int64_t RowBytes() const { return steps.on ? steps.sample_schema.ItemBytes() : 8 + pad_bytes; }
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
           steps.Describe();
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

// A shard's one table (every server is a StepReplay): of transitions (each
// step a self-checking row and the item over itself: a ring of the seed's
// capacity, as many items) or of the seed's step streams (its ring; items
// up to the seed's capacity), with a stream per client index and the items'
// options `items` (capacity, alpha, seed, priority policy).
inline Status CreateShardReplay(const SimulationConfig& config, int streams, const replay::ReplayOptions& items,
                                std::unique_ptr<replay::StepReplay>* out) {
  replay::StepOptions options = config.steps.options;
  Schema step_schema = config.steps.step_schema;
  if (!config.steps.on) {
    options = replay::StepOptions{};
    options.kind = replay::StepOptions::Kind::kTransition;
    options.step_capacity = config.capacity;
    step_schema = SelfCheckingSchema(config.pad_bytes);
  }
  options.streams = streams;
  return replay::StepReplay::Create(options, items, std::move(step_schema), out);
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
  options.stats_interval_seconds = 0;  // no wall-clock lines
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

}  // namespace perserve::service::simulation
