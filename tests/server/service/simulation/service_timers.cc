#include "server/service/simulation/service_timers.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "server/service/simulation/reference_model.h"
#include "service/service_clock.h"

namespace perserve::service::simulation {
namespace {

// Seconds from `since` to `now`, as the service's timers compute them.
double SecondsBetween(std::chrono::steady_clock::time_point since, std::chrono::steady_clock::time_point now) {
  return std::chrono::duration<double>(now - since).count();
}

}  // namespace

void DrawTimers(PortableRandom& timers, bool checkpoints, ServiceOptions* options) {
  // Both chances are drawn whatever they say, so the stream's constant
  // alone decides which seeds draw a timer (schedule_random.h).
  const bool periodic = timers.Chance(0.5);
  const bool stats = timers.Chance(0.3);
  // A run lasts 0.05-0.5 s of the simulation's clock (1 ms a step), a
  // checkpoint a few steps (a slice a pass): every 20 ms the next is often
  // due while one is being written.
  if (checkpoints && periodic) options->checkpoint_every_seconds = std::array{0.02, 0.05, 0.1}[timers.Int(0, 2)];
  if (stats) options->stats_interval_seconds = std::array{0.003, 0.01, 0.05}[timers.Int(0, 2)];
}

std::string DescribeTimers(const ServiceOptions& options) {
  std::string text;
  if (options.checkpoint_every_seconds > 0) {
    text += fmt::format("; periodic checkpoints every {} s", options.checkpoint_every_seconds);
  }
  if (options.stats_interval_seconds > 0) text += fmt::format("; stats lines every {} s", options.stats_interval_seconds);
  return text;
}

ServiceTimers::ServiceTimers(const ServiceOptions& options, int shards, TimePoint start)
    : start_(start),
      every_seconds_(options.checkpoint_dir.empty() ? 0.0 : options.checkpoint_every_seconds),
      interval_seconds_(options.stats_interval_seconds) {
  ShardTimers timers;
  timers.next_periodic = every_seconds_ > 0 ? start + ClockDuration(every_seconds_) : TimePoint::max();
  timers.last_line = start;
  shards_.assign(static_cast<size_t>(shards), timers);
}

void ServiceTimers::Stepped(int shard, const ReplayService& service, const replay::StepReplay& replay, TimePoint now,
                            bool terminated) {
  ShardTimers& timers = shards_[static_cast<size_t>(shard)];
  CheckPeriodic(shard, service, now, terminated, &timers);
  CheckStatsLine(shard, service, replay, now, &timers);
}

void ServiceTimers::CheckPeriodic(int shard, const ReplayService& service, TimePoint now, bool terminated,
                                  ShardTimers* timers) {
  const int64_t asked = service.periodic_checkpoints() - timers->periodic_requests;
  const bool due = now >= timers->next_periodic;
  if (asked < 0 || asked > 1 || (asked == 1 && !due) || (asked == 0 && due && !terminated)) {
    throw SimulationFailure(fmt::format("shard {}: the periodic timer (every {} s) asked for {} checkpoints at {:.3f} s "
                                        "of the simulation's clock, the next due at {:.3f} s",
                                        shard, every_seconds_, asked, SecondsBetween(start_, now),
                                        SecondsBetween(start_, timers->next_periodic)));
  }
  if (asked == 0) return;
  timers->periodic_requests += asked;
  timers->next_periodic = now + ClockDuration(every_seconds_);
  ++periodic_checkpoints_;
}

void ServiceTimers::CheckStatsLine(int shard, const ReplayService& service, const replay::StepReplay& replay,
                                   TimePoint now, ShardTimers* timers) {
  const int64_t lines = service.counters().stats_lines - timers->lines;
  const double seconds = SecondsBetween(timers->last_line, now);
  const bool due = interval_seconds_ > 0 && seconds >= interval_seconds_;
  if (lines != (due ? 1 : 0)) {
    throw SimulationFailure(fmt::format("shard {}: {} stats lines (every {} s) in a step {:.3f} s after the last "
                                        "(or the start): {} expected",
                                        shard, lines, interval_seconds_, seconds, due ? 1 : 0));
  }
  if (lines == 0) return;
  const std::string& line = service.last_stats_line();
  timers->added_at_last_line.resize(static_cast<size_t>(replay.tables()), 0);
  for (int t = 0; t < replay.tables(); ++t) {
    const replay::Replay& items = replay.table(t).items();
    int64_t& at_last = timers->added_at_last_line[static_cast<size_t>(t)];
    const double in = static_cast<double>(items.counters().items_added - at_last) / std::max(1e-9, seconds);
    // The line's words for this table (stats_line.h): its size and the
    // items added per second of the simulation's clock since the last line.
    const std::string told = replay.tables() == 1
                                 ? fmt::format("size {} | in {:.0f} items/s |", items.size(), in)
                                 : fmt::format("{}{} size {} in {:.0f}/s ", t == 0 ? "tables: " : "; ",
                                               replay.table(t).name(), items.size(), in);
    if (line.find(told) == std::string::npos) {
      throw SimulationFailure(
          fmt::format("shard {}: the stats line does not say \"{}\" as the replay has it: {}", shard, told, line));
    }
    at_last = items.counters().items_added;
  }
  timers->last_line = now;
  timers->lines += lines;
  ++stats_lines_;
}

}  // namespace perserve::service::simulation
