// ClientBook: the replay rank's clients as the service loop sees them: each
// one's role, open or closed, when it was last heard from, and a close that
// waits behind its held adds. It owns nothing else: what a client has
// waiting (samples, adds) lives with WaitingSamples and HeldAdds.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "service/transport/transport.h"

namespace perserve::service {

class ClientBook {
 public:
  using Clock = std::chrono::steady_clock;

  // Every client open, heard from at `now`. An unknown role counts as both an
  // actor and a learner.
  ClientBook(std::vector<ClientRole> roles, Clock::time_point now);

  int size() const { return static_cast<int>(roles_.size()); }
  bool open(int client) const { return open_[client]; }
  ClientRole role(int client) const { return roles_[client]; }
  int open_clients() const { return open_clients_; }
  int open_actors() const { return open_actors_; }
  int open_learners() const { return open_learners_; }

  void Heard(int client, Clock::time_point now) { last_heard_[client] = now; }
  // Marks `client` closed; false (and nothing changes) if it was already.
  bool Close(int client, Clock::time_point now);

  // A close request that waits until the client's held adds are out.
  const std::optional<uint64_t>& pending_close(int client) const { return pending_close_[client]; }
  void SetPendingClose(int client, uint64_t request_id) { pending_close_[client] = request_id; }
  std::optional<uint64_t> TakePendingClose(int client);

  // Since when an actor is open with no learner open (intake goes on and
  // nothing samples); none otherwise.
  std::optional<Clock::time_point> without_learners_since() const {
    if (open_actors_ == 0 || open_learners_ > 0) return std::nullopt;
    return without_learners_since_;
  }

  // "open A actors, B learners[, C others]", and how long intake has gone on
  // without a learner.
  std::string DescribeOpen(Clock::time_point now) const;
  // " | silent: ..." naming (by `name`, the first 8) the open clients not heard
  // from for over `silent_after` seconds; empty when none.
  std::string DescribeSilent(Clock::time_point now, double silent_after,
                             const std::function<std::string(int)>& name) const;

 private:
  std::vector<ClientRole> roles_;
  std::vector<bool> open_;
  std::vector<Clock::time_point> last_heard_;
  std::vector<std::optional<uint64_t>> pending_close_;
  int open_clients_ = 0;
  int open_actors_ = 0;
  int open_learners_ = 0;
  Clock::time_point without_learners_since_;
};

}  // namespace perserve::service
