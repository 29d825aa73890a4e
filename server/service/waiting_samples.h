// WaitingSamples: the sample requests that cannot be served yet (the replay
// too small, the rate limiter, the client's unread replies), in arrival order,
// and how many each client has waiting. It decides nothing: the service asks
// each one's wait and serves, refuses or expires it; this keeps the queue and
// the per-client counts in step.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace perserve::service {

struct WaitingSample {
  using Clock = std::chrono::steady_clock;
  int client;
  uint64_t request_id;
  int64_t batch_size;
  double beta;
  Clock::time_point arrived;
  Clock::time_point deadline;  // Clock::time_point::max(): none
  bool shard_sample = false;   // a ShardSampleRequest: draws at `fractions` (a probe when empty)
  std::vector<double> fractions{};
  bool awaited = false;  // the client receives the reply next: its rows may go from the store
  int table = 0;         // the table it samples (an index of the replay's)
};

class WaitingSamples {
 public:
  using Iterator = std::deque<WaitingSample>::iterator;

  explicit WaitingSamples(int clients) : per_client_(static_cast<size_t>(clients), 0) {}

  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  const WaitingSample& front() const { return queue_.front(); }
  int count(int client) const { return per_client_[client]; }
  Iterator begin() { return queue_.begin(); }
  Iterator end() { return queue_.end(); }
  std::deque<WaitingSample>::const_iterator begin() const { return queue_.begin(); }
  std::deque<WaitingSample>::const_iterator end() const { return queue_.end(); }

  void Push(WaitingSample sample) {
    ++per_client_[sample.client];
    queue_.push_back(std::move(sample));
  }
  // Takes the sample at *it out; *it moves to the next.
  WaitingSample Take(Iterator* it) {
    WaitingSample sample = std::move(**it);
    *it = queue_.erase(*it);
    --per_client_[sample.client];
    return sample;
  }
  // Every waiting sample, in order; none is left.
  std::deque<WaitingSample> TakeAll() {
    std::fill(per_client_.begin(), per_client_.end(), 0);
    return std::exchange(queue_, {});
  }
  // Forgets `client`'s (it closed: nothing is answered after its close reply).
  void ForgetClient(int client) {
    std::erase_if(queue_, [client](const WaitingSample& s) { return s.client == client; });
    per_client_[client] = 0;
  }

 private:
  std::deque<WaitingSample> queue_;
  std::vector<int> per_client_;
};

}  // namespace perserve::service
