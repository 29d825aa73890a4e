// Step streams in the simulation (docs/steps.md): a share of the seeds run
// services that store each actor's steps in a ring and items over them
// (StepReplay), drawn from a fourth stream (ScheduleRandom::StepsSeed) so a
// seed that draws none runs exactly as before. The rest of the seed's
// configuration (clients, shards, rate limiter, timeouts, signals) is drawn
// as for any seed; the items' replay has the seed's capacity.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "perserve/schema.h"
#include "replay/step_replay.h"
#include "server/service/simulation/portable_random.h"
#include "service/rate_limiter.h"
#include "table/selector.h"

namespace perserve::service::simulation {

// The share of seeds whose services store step streams.
inline constexpr double kStepConfigShare = 0.3;
// The share of those whose services hold several tables (DrawTables).
inline constexpr double kTablesShare = 0.5;

// One table of a service of step streams (issue 34): the default one (the
// seed's layout, prioritized, the seed's capacity and rate limiter) and
// those drawn beside it from the sixth stream (DrawTables), each with its
// own item layout over the same ring, sampler, remover, max_times_sampled,
// capacity, minimum size and rate limiter.
struct SimTable {
  std::string name = "default";
  replay::StepOptions layout;   // the ring's capacity and streams are the default table's
  replay::ReplayOptions items;  // capacity, alpha, seed, sampler, remover, max_times_sampled
  RateLimiterOptions limiter;
  Schema sample_schema;  // what a sample returns (StepSchemas)
  Schema stored_schema;  // what the table's replay stores

  table::SelectorKind sampler() const { return items.sampler; }
  // Whether it takes priority updates: prioritized and the heaps do.
  bool takes_updates() const {
    return sampler() == table::SelectorKind::kPrioritized || sampler() == table::SelectorKind::kMaxHeap ||
           sampler() == table::SelectorKind::kMinHeap;
  }
  // Whether a shard sample draws from it at fractions (Replay::SampleAt).
  bool draws_at_fractions() const {
    return sampler() == table::SelectorKind::kPrioritized && items.max_times_sampled == 0;
  }
  std::string Describe() const {
    const bool n_step = layout.kind == replay::StepOptions::Kind::kNStep;
    std::string stacks;
    for (const auto& [column, depth] : layout.stacks) stacks += fmt::format(" {}:{}", column, depth);
    if (!layout.stacks.empty() && layout.frames_first) stacks += " (frames first)";
    return fmt::format(
        "{} ({}, stacks{}, {} items, sampler {}, remover {}, max times sampled {}, min size {}, rate limiter {} "
        "(buffer {}))",
        name,
        n_step ? fmt::format("{}-step, discount {}", layout.n_step, layout.discount)
               : fmt::format("sequences of {} every {}", layout.sequence_length, layout.sequence_period),
        stacks.empty() ? " none" : stacks, items.capacity, table::SelectorKindName(items.sampler),
        items.remover == replay::RemoverKind::kOldestFirst ? "fifo" : "min_heap", items.max_times_sampled,
        limiter.min_size_to_sample, limiter.samples_per_insert, limiter.error_buffer);
  }
};


struct StepStreamsConfig {
  bool on = false;
  replay::StepOptions options;  // streams: each shard's client count, set at its start
  Schema step_schema;           // obs uint8, action int32, reward float32/float64, done uint8
  Schema sample_schema;         // what a sample returns (StepSchemas)
  Schema stored_schema;         // what the items' replay stores
  double episode_end = 0.1;     // the chance that a step ends its episode
  int max_append = 6;           // steps in one append (at most)
  // Every table, the default one first (its layout is `options`, its
  // schemas the two above): filled by DrawTables.
  std::vector<SimTable> tables;

  bool n_step() const { return options.kind == replay::StepOptions::Kind::kNStep; }
  std::string Describe() const {
    if (!on) return "";
    std::string stacks;
    for (const auto& [name, depth] : options.stacks) stacks += fmt::format(" {}:{}", name, depth);
    if (!options.stacks.empty() && options.frames_first) stacks += " (frames first)";
    return fmt::format(
        "; step streams: {}, stacks{}, ring of {} steps, step {}, items carry {}, episodes end with odds {:.2f}",
        n_step() ? fmt::format("{}-step, discount {}", options.n_step, options.discount)
                 : fmt::format("sequences of {} every {}", options.sequence_length, options.sequence_period),
        stacks.empty() ? " none" : stacks, options.step_capacity, step_schema.ToString(),
        options.item_columns.empty() ? "nothing" : Schema{options.item_columns}.ToString(), episode_end) +
           DescribeTables();
  }
  std::string DescribeTables() const {
    if (tables.size() <= 1) return "";
    std::string text = "; tables:";
    for (size_t t = 1; t < tables.size(); ++t) text += (t == 1 ? " " : "; ") + tables[t].Describe();
    return text;
  }
};

// Where every episode's end is drawn: a step's done value. 0 goes on; 1
// ends the episode (terminal), 2 cuts it off (truncated: the step is its
// bootstrap step, docs/steps.md), a third of the ends.
inline uint8_t DrawEpisodeEnd(PortableRandom& rng, double episode_end) {
  if (!rng.Chance(episode_end)) return 0;
  return rng.Chance(1.0 / 3) ? 2 : 1;
}

// Draws the step streams of a seed from the fourth stream, or none.
// `min_size_to_sample` is lowered to what a small ring keeps whole.
inline StepStreamsConfig DrawStepConfig(PortableRandom& steps, int64_t* min_size_to_sample) {
  auto pick = [&steps](int64_t lo, int64_t hi) { return steps.Int(lo, hi); };
  auto chance = [&steps](double p) { return steps.Chance(p); };
  StepStreamsConfig config;
  if (!chance(kStepConfigShare)) return config;
  config.on = true;
  replay::StepOptions& o = config.options;
  std::vector<int64_t> obs_shape = {pick(1, 3)};
  if (chance(0.4)) obs_shape.insert(obs_shape.begin(), 2);
  config.step_schema = Schema{{{"obs", DType::kUInt8, obs_shape},
                               {"action", DType::kInt32, {}},
                               {"reward", chance(0.5) ? DType::kFloat32 : DType::kFloat64, {}},
                               {"done", DType::kUInt8, {}}}};
  const int depth = static_cast<int>(pick(1, 4));
  if (chance(0.5)) {
    o.kind = replay::StepOptions::Kind::kNStep;
    o.n_step = static_cast<int>(pick(1, 4));
    const int64_t discount = pick(0, 4);
    o.discount = discount == 0 ? 0.0 : discount == 1 ? 1.0 : steps.Real(0.0, 1.0);
    if (chance(0.8)) o.stacks.emplace_back("obs", depth);  // else obs:1 by default
    if (chance(0.3)) o.item_columns.push_back(Column{"state", DType::kFloat32, {2}});
  } else {
    o.kind = replay::StepOptions::Kind::kSequence;
    o.sequence_length = static_cast<int>(pick(1, 5));
    o.sequence_period = static_cast<int>(pick(1, o.sequence_length));
    if (chance(0.7)) o.stacks.emplace_back("obs", depth);
    o.item_columns.push_back(Column{"state", DType::kFloat32, {2}});
  }
  const int k = o.stacks.empty() ? 1 : o.stacks.front().second;
  const int64_t span = config.n_step() ? o.n_step + k : o.sequence_length + k - 1;
  // Small rings: wrapped many times in a run, and items evicted with their steps.
  o.step_capacity = span + (chance(0.3) ? pick(0, 3) : pick(4, 40));
  config.episode_end = std::array{0.05, 0.15, 0.4}[static_cast<size_t>(pick(0, 2))];
  config.max_append = static_cast<int>(std::min<int64_t>(pick(1, 8), o.step_capacity));
  *min_size_to_sample = std::min<int64_t>(*min_size_to_sample, pick(1, 4));
  o.frames_first = chance(0.5);
  o.streams = 1;  // for StepSchemas; each shard's own at its start
  const Status made = replay::StepSchemas(o, config.step_schema, &config.sample_schema, &config.stored_schema);
  if (!made.ok()) throw std::logic_error("the simulation drew step options StepSchemas refuses: " + made.ToString());
  return config;
}

}  // namespace perserve::service::simulation
