// CheckpointDriver: when the replay rank's checkpoints are taken and who
// hears of them. It owns the CheckpointWriter, the requests waiting for the
// checkpoint being written and for the next one, the periodic timer and
// SIGTERM's final checkpoint; the service calls it between operations (Step,
// Request) and before each append writes (BeforeWrite), and hears back
// through Hooks.
//
// A checkpoint is the replay as it was when it began (the writer keeps the
// rows an add would overwrite). One being written when another is asked for:
// the next begins when it ends, for every request that came meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "perserve/status.h"
#include "replay/step_replay.h"
#include "service/checkpoint/checkpoint.h"
#include "service/service_clock.h"

namespace perserve::service {

struct CheckpointDriverOptions {
  std::string dir;  // empty: no checkpoints (every request is refused)
  int shard = 0;
  int shards = 1;
  double every_seconds = 0.0;  // > 0: one every this many seconds
  std::chrono::microseconds slice{2000};  // written per Step
  ServiceClock clock{};  // the service's: the periodic timer and the slices run on it
  FileSystem* file_system = PosixFileSystem();  // what checkpoints are written to (not owned)
};

class CheckpointDriver {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    // What a checkpoint keeps beside the rows and leaves, as it is now.
    std::function<CheckpointState()> state;
    // A waiting request's answer: OK (the complete checkpoint: last_path()) or why not.
    std::function<void(int client, uint64_t request_id, const Status& result)> answer;
    // SIGTERM's checkpoint began, or could not: from now on nothing is acknowledged.
    std::function<void()> final_begun;
    // A checkpoint began (its path): it holds the replay as it is now. Empty: none told.
    std::function<void(const std::string& path)> begun{};
  };

  // Checkpoints of `replay` (not owned).
  CheckpointDriver(const replay::StepReplay* replay, CheckpointDriverOptions options, Hooks hooks);

  bool enabled() const { return writer_ != nullptr; }
  // FAILED_PRECONDITION, saying how to enable them, without a directory.
  Status CheckEnabled() const;
  const CheckpointWriter* writer() const { return writer_.get(); }
  bool active() const { return writer_ != nullptr && writer_->active(); }
  // SIGTERM's checkpoint is being written.
  bool writing_final() const { return final_began_ && active(); }
  // SIGTERM's checkpoint is wanted (after the one being written) or being written.
  bool final_unfinished() const { return final_wanted_ || writing_final(); }
  // How often the periodic timer has asked for a checkpoint (each begins
  // then, or after the one being written).
  int64_t periodic_requests() const { return periodic_requests_; }

  // Asks for a checkpoint (`reason` goes to the log): it begins now unless one
  // is being written. `final`: SIGTERM's, after which the service stops
  // serving. FAILED_PRECONDITION without a directory.
  Status Request(const std::string& reason, bool final = false);
  // `client`'s request waits for the next checkpoint to begin, and is
  // answered when that one is complete or has failed.
  void AddWaiter(int client, uint64_t request_id) { next_waiters_.emplace_back(client, request_id); }
  // Between operations, each pass: begins a wanted checkpoint, keeps the
  // periodic timer (not once `stopping`), writes a slice.
  void Step(bool stopping);
  // Before `steps` steps go into the ring's next slots (BeforeWrite), or
  // the append StepReplay::Prepare planned commits its steps and every
  // table's planned item slots (BeforeCommit): a checkpoint being written
  // first writes what it still needs there (an error abandons the
  // checkpoint, not the append).
  void BeforeWrite(int64_t steps);
  void BeforeCommit(int64_t steps);
  // `client` closed: its waiting requests are answered now with `closed`.
  void ForgetClient(int client, const Status& closed);
  // The service stops serving: nothing more is wanted; the requests waiting
  // for a next checkpoint are answered `stopped`.
  void Stop(const Status& stopped);

 private:
  void Begin();
  void Ended(const Status& error);

  const replay::StepReplay* replay_;
  CheckpointDriverOptions options_;
  Hooks hooks_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::vector<std::pair<int, uint64_t>> waiters_, next_waiters_;
  bool wanted_ = false;        // the next one should begin
  bool final_wanted_ = false;  // ... and it is SIGTERM's
  bool final_began_ = false;
  bool periodic_wanted_ = false;   // the timer asked for the next one
  bool writing_periodic_ = false;  // ... and it is the one being written
  std::string reason_;
  Clock::time_point next_periodic_ = Clock::time_point::max();
  int64_t periodic_requests_ = 0;
};

}  // namespace perserve::service
