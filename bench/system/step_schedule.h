// StepSchedule: one actor's stream of steps for the benchmarks that append
// Atari-like steps (perserve_bench_system's step-stream sizes,
// perserve_bench_apex): the done flags of episodes of kEpisodeSteps +- 10%
// steps, and for each append the items it completes, as an actor creates them
// as soon as it can: an item at t once step t + reach is in or t's episode
// has ended (an n-step item: reach n; a sequence of L steps: L - 1), items
// starting every `period` steps of an episode (an n-step item: every step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace perserve::bench {

inline constexpr int64_t kEpisodeSteps = 1000;  // episodes of 1000 +- 10% steps

class StepSchedule {
 public:
  StepSchedule(int64_t reach, int64_t period, uint64_t seed)
      : period_(period),
        reach_(reach),
        rng_(seed),
        length_(kEpisodeSteps - kEpisodeSteps / 10, kEpisodeSteps + kEpisodeSteps / 10),
        episode_left_(length_(rng_)) {}

  // The next `count` steps: their done flags into `done` (count bytes), and
  // the stream indices of the items they complete into `items`.
  void Next(int64_t count, std::span<std::byte> done, std::vector<int64_t>* items) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t t = appended_ + j;
      if ((t - episode_start_) % period_ == 0) pending_.push_back(t);
      const bool last = --episode_left_ == 0;
      done[static_cast<size_t>(j)] = last ? std::byte{1} : std::byte{0};
      if (last) {
        last_done_ = t;
        episode_start_ = t + 1;
        episode_left_ = length_(rng_);
      }
    }
    appended_ += count;
    items->clear();
    // Items complete in order: the oldest pending one reaches its last step first.
    while (!pending_.empty() && (pending_.front() + reach_ < appended_ || last_done_ >= pending_.front())) {
      items->push_back(pending_.front());
      pending_.pop_front();
    }
  }

 private:
  int64_t period_;  // items start every period_ steps of an episode
  int64_t reach_;   // an item at t is complete once step t + reach_ is in
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int64_t> length_;
  int64_t episode_left_;
  int64_t appended_ = 0, episode_start_ = 0, last_done_ = -1;
  std::deque<int64_t> pending_;  // items begun, not complete yet
};

}  // namespace perserve::bench
