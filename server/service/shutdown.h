// Shutdown: the end of serving after SIGTERM (or Ctrl-C). From Begin on,
// every request but a close is answered UNAVAILABLE (Refusal says why and
// where the checkpoint is); the clients get a grace (kGrace) to see it and
// close, counted from the end of the final checkpoint: while that is written
// perserve-server makes no MPI call (its transport pauses), so a grace
// running meanwhile would leave live clients no time to hear of it.
#pragma once

#include <chrono>
#include <string>

#include "perserve/status.h"
#include "service/checkpoint/checkpoint_driver.h"

namespace perserve::service {

class Shutdown {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kGrace{10};

  bool stopping() const { return stopping_; }
  // Serving stops now; the grace starts once no final checkpoint is unfinished.
  void Begin(Clock::time_point now, const CheckpointDriver& checkpoints);
  // Each pass: starts the grace when the final checkpoint has just completed.
  void Step(Clock::time_point now, const CheckpointDriver& checkpoints);
  // Whether the grace has passed.
  bool Over(Clock::time_point now) const { return stopping_ && now >= deadline_; }
  // UNAVAILABLE, with where the checkpoint that holds what was acknowledged is.
  static Status Refusal(const CheckpointDriver& checkpoints);
  // The log lines of Begin (open clients, where to restore from).
  static void Log(int open_clients, const std::string& checkpoint_dir, const CheckpointDriver& checkpoints);

 private:
  bool stopping_ = false;
  Clock::time_point deadline_ = Clock::time_point::max();  // max while the final checkpoint is unfinished
};

}  // namespace perserve::service
