// The service's counters and the lines that report them: the periodic stats
// line (rates since the last one) and the summary at the end. StatsLine owns
// only the interval; what waits and who is open come from their owners.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/rate_limiter.h"

namespace perserve::service {

struct ServiceCounters {
  int64_t messages = 0;
  int64_t add_requests = 0;
  int64_t sample_requests = 0;
  int64_t update_requests = 0;
  int64_t errors = 0;
  int64_t deferred_samples = 0;  // sample requests that had to wait
  int64_t replies_dropped = 0;   // replies the transport refused to send
  int64_t deferred_adds = 0;     // add requests the rate limiter held back
  int64_t deadlines_exceeded = 0;
  int64_t limiter_overrides = 0;  // adds let through so both kinds could not wait on each other
  int64_t zero_copy_replies = 0;  // sample replies sent from the store
  int64_t pinned_adds = 0;        // adds held because they would overwrite rows of a reply in flight
  int64_t stats_lines = 0;        // periodic stats lines logged
};

// The whole job's counts, for the final line: with several tables, each
// table's counts and rate limiter after its name.
std::string Summary(const replay::StepReplay& replay, const ServiceCounters& counters,
                    const std::vector<RateLimiter>& limiters);

class StatsLine {
 public:
  using Clock = std::chrono::steady_clock;
  // <= 0: never due. The first interval begins at `start`, a time of the
  // clock every `now` below comes from (the service's).
  StatsLine(double interval_seconds, Clock::time_point start) : interval_seconds_(interval_seconds), since_(start) {}

  bool Due(Clock::time_point now) const {
    return interval_seconds_ > 0 && std::chrono::duration<double>(now - since_).count() >= interval_seconds_;
  }
  // "size N | in X items/s | sampled ... | errors E | rss R MiB": the counts
  // since the last line (or the start); the next interval begins at `now`.
  // With several tables: "tables: apex size N in X/s sampled Y/s updated
  // Z/s stale S; r2d2 size ... | errors E | rss R MiB".
  std::string Take(const replay::StepReplay& replay, const ServiceCounters& counters, Clock::time_point now);

 private:
  double interval_seconds_;
  Clock::time_point since_;
  std::vector<replay::ReplayCounters> replay_at_last_;  // a table's
  ServiceCounters service_at_last_;
};

}  // namespace perserve::service
