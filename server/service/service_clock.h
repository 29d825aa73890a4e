// ServiceClock: the one clock a replay rank measures time on. Every
// deadline, wait, grace, timer (periodic checkpoints, stats lines) and time
// budget (a checkpoint's slice) of the service and its parts reads it; the
// service is given it (ServiceOptions::clock) and hands it to the parts that
// keep time of their own. Empty: the steady clock. The simulation gives its
// own, so every timer fires at the same step of every run.
#pragma once

#include <chrono>
#include <functional>
#include <utility>

namespace perserve::service {

class ServiceClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  ServiceClock() = default;  // the steady clock
  explicit ServiceClock(std::function<TimePoint()> now) : now_(std::move(now)) {}

  TimePoint Now() const { return now_ ? now_() : std::chrono::steady_clock::now(); }

 private:
  std::function<TimePoint()> now_;
};

// `seconds` as the clock's duration (for timers set from options in seconds).
inline std::chrono::steady_clock::duration ClockDuration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace perserve::service
