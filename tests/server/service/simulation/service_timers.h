// The service's timers on the simulation's clock (issue 35: the service has
// one clock, ServiceOptions::clock, and every part keeps time on it):
// periodic checkpoints (checkpoint_every_seconds, with a checkpoint
// directory) and stats lines (stats_interval_seconds), drawn for a share of
// the seeds from a stream of their own (ScheduleRandom::TimersSeed), so
// every seed that draws neither runs as it did before they came.
//
// ServiceTimers checks, after each step of a shard, that each timer fired
// exactly at the steps the simulation's clock made it due (a timer on the
// steady clock fires at none of them: the simulation's clock is hours away
// from it, and stands still within a step): the periodic timer asks for a
// checkpoint when due (it may stop once SIGTERM came) and never before,
// each stats line comes when due and never before, and tells each table's
// size and intake rate (items added over the simulated seconds since the
// last line) as the replay has them. Every checkpoint the timer asks for is
// checked as every other (checkpoint_checks.h): complete, it must restore.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "replay/step_replay.h"
#include "server/service/simulation/portable_random.h"
#include "service/replay_service.h"

namespace perserve::service::simulation {

// Draws a seed's timers into `options`: a checkpoint timer (about half the
// seeds with `checkpoints`) and stats lines (about 30%); none otherwise.
void DrawTimers(PortableRandom& timers, bool checkpoints, ServiceOptions* options);
// "; periodic checkpoints every X s, stats lines every Y s", or "".
std::string DescribeTimers(const ServiceOptions& options);

class ServiceTimers {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Services made with `options` at `start` of the simulation's clock, one a shard.
  ServiceTimers(const ServiceOptions& options, int shards, TimePoint start);

  // After shard `shard`'s service stepped at `now`; `terminated`: SIGTERM
  // was sent (its service stops the periodic timer once it stops serving).
  // Throws SimulationFailure when a timer fired off its time, or a stats
  // line tells other numbers than `replay`'s.
  void Stepped(int shard, const ReplayService& service, const replay::StepReplay& replay, TimePoint now,
               bool terminated);

  // Over every shard: checkpoints the periodic timer asked for, stats lines checked.
  int64_t periodic_checkpoints() const { return periodic_checkpoints_; }
  int64_t stats_lines() const { return stats_lines_; }

 private:
  struct ShardTimers {
    TimePoint next_periodic;
    int64_t periodic_requests = 0;
    TimePoint last_line;
    int64_t lines = 0;
    std::vector<int64_t> added_at_last_line;  // a table's items ever added
  };
  void CheckPeriodic(int shard, const ReplayService& service, TimePoint now, bool terminated, ShardTimers* timers);
  void CheckStatsLine(int shard, const ReplayService& service, const replay::StepReplay& replay, TimePoint now,
                      ShardTimers* timers);

  TimePoint start_;
  double every_seconds_, interval_seconds_;
  std::vector<ShardTimers> shards_;
  int64_t periodic_checkpoints_ = 0, stats_lines_ = 0;
};

}  // namespace perserve::service::simulation
