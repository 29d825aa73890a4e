#include "service/stats_line.h"

#include <algorithm>

#include <fmt/format.h>

#include "service/resident_memory.h"

namespace perserve::service {

std::string Summary(const replay::StepReplay& steps, const ServiceCounters& counters,
                    const std::vector<RateLimiter>& limiters) {
  const auto table_counts = [](const replay::Replay& replay) {
    const replay::ReplayCounters& r = replay.counters();
    return fmt::format("size {} of {}, {} items in, {} sampled, {} priorities updated, {} stale updates dropped, "
                       "{} bad priorities dropped",
                       replay.size(), replay.capacity(), r.items_added, r.items_sampled, r.priorities_updated,
                       r.stale_updates_dropped, r.priorities_dropped);
  };
  std::string summary;
  if (steps.tables() == 1) {
    summary = table_counts(steps.items());
    summary += ", ";
  } else {
    for (int t = 0; t < steps.tables(); ++t) {
      const RateLimiter& limiter = limiters[static_cast<size_t>(t)];
      summary += fmt::format("table {}: {}{}; ", steps.table(t).name(), table_counts(steps.table(t).items()),
                             limiter.enabled() ? ", rate limiter " + limiter.Describe() : std::string());
    }
  }
  summary += fmt::format("{} requests ({} add, {} sample, {} update), {} errors, {} replies dropped, "
                         "{} deadlines exceeded",
                         counters.messages, counters.add_requests, counters.sample_requests,
                         counters.update_requests, counters.errors, counters.replies_dropped,
                         counters.deadlines_exceeded);
  const bool limited = std::any_of(limiters.begin(), limiters.end(), [](const RateLimiter& l) { return l.enabled(); });
  if (limited) {
    summary += fmt::format("; rate limiter{}, {} adds held, {} let through",
                           steps.tables() == 1 ? fmt::format(" {}", limiters.front().Describe()) : std::string(),
                           counters.deferred_adds, counters.limiter_overrides);
  }
  if (counters.zero_copy_replies > 0) {
    summary += fmt::format("; {} sample replies sent from the store, {} adds waited for their rows",
                           counters.zero_copy_replies, counters.pinned_adds);
  }
  return summary;
}

std::string StatsLine::Take(const replay::StepReplay& steps, const ServiceCounters& counters, Clock::time_point now) {
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - since_).count());
  replay_at_last_.resize(static_cast<size_t>(steps.tables()));
  std::string line;
  for (int t = 0; t < steps.tables(); ++t) {
    const replay::Replay& replay = steps.table(t).items();
    const replay::ReplayCounters& r = replay.counters();
    replay::ReplayCounters& last = replay_at_last_[static_cast<size_t>(t)];
    const double in = (r.items_added - last.items_added) / seconds;
    const double sampled = (r.items_sampled - last.items_sampled) / seconds;
    const double updated = (r.priorities_updated - last.priorities_updated) / seconds;
    if (steps.tables() == 1) {
      line = fmt::format("size {} | in {:.0f} items/s | sampled {:.0f} items/s | updated {:.0f}/s | stale dropped {} | "
                         "bad priorities dropped {}",
                         replay.size(), in, sampled, updated, r.stale_updates_dropped - last.stale_updates_dropped,
                         r.priorities_dropped - last.priorities_dropped);
    } else {
      line += fmt::format("{}{} size {} in {:.0f}/s sampled {:.0f}/s updated {:.0f}/s stale {}",
                          t == 0 ? "tables: " : "; ", steps.table(t).name(), replay.size(), in, sampled, updated,
                          r.stale_updates_dropped - last.stale_updates_dropped);
    }
    last = r;
  }
  line += fmt::format(" | errors {} | rss {} MiB", counters.errors - service_at_last_.errors, ResidentBytes() >> 20);
  service_at_last_ = counters;
  since_ = now;
  return line;
}

}  // namespace perserve::service
