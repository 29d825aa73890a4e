#include "service/stats_line.h"

#include <algorithm>

#include <fmt/format.h>

#include "service/resident_memory.h"

namespace perserve::service {

std::string Summary(const replay::Replay& replay, const ServiceCounters& counters, const RateLimiter& limiter) {
  const replay::ReplayCounters& r = replay.counters();
  std::string summary = fmt::format(
      "size {} of {}, {} items in, {} sampled, {} priorities updated, {} stale updates dropped, "
      "{} bad priorities dropped, {} requests ({} add, {} sample, {} update), {} errors, {} replies dropped, "
      "{} deadlines exceeded",
      replay.size(), replay.capacity(), r.items_added, r.items_sampled, r.priorities_updated,
      r.stale_updates_dropped, r.priorities_dropped, counters.messages, counters.add_requests,
      counters.sample_requests, counters.update_requests, counters.errors, counters.replies_dropped,
      counters.deadlines_exceeded);
  if (limiter.enabled()) {
    summary += fmt::format("; rate limiter {}, {} adds held, {} let through", limiter.Describe(),
                           counters.deferred_adds, counters.limiter_overrides);
  }
  if (counters.zero_copy_replies > 0) {
    summary += fmt::format("; {} sample replies sent from the store, {} adds waited for their rows",
                           counters.zero_copy_replies, counters.pinned_adds);
  }
  return summary;
}

std::string StatsLine::Take(const replay::Replay& replay, const ServiceCounters& counters, Clock::time_point now) {
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - since_).count());
  const replay::ReplayCounters& r = replay.counters();
  std::string line = fmt::format(
      "size {} | in {:.0f} items/s | sampled {:.0f} items/s | updated {:.0f}/s | stale dropped {} | "
      "bad priorities dropped {} | errors {} | rss {} MiB",
      replay.size(), (r.items_added - replay_at_last_.items_added) / seconds,
      (r.items_sampled - replay_at_last_.items_sampled) / seconds,
      (r.priorities_updated - replay_at_last_.priorities_updated) / seconds,
      r.stale_updates_dropped - replay_at_last_.stale_updates_dropped,
      r.priorities_dropped - replay_at_last_.priorities_dropped, counters.errors - service_at_last_.errors,
      ResidentBytes() >> 20);
  replay_at_last_ = r;
  service_at_last_ = counters;
  since_ = now;
  return line;
}

}  // namespace perserve::service
