#include "tree/strategy_table.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace perserve::tree {
namespace {

constexpr int64_t kLargestMeasuredBatch = int64_t{1} << 16;
// A strategy reaches its steady speed only after several updates (a rebuild
// streams the whole tree through the caches and changes what the next
// strategy finds there; at 2^21 leaves speeds settle after ~8 updates), so
// each first runs untimed for at least this many updates and this long ...
constexpr int kWarmupUpdates = 8;
constexpr double kWarmupSeconds = 1e-3;
// ... and is then timed over at least this many updates and this long; the
// median update counts.
constexpr int kTimedUpdates = 5;
constexpr double kTimedSeconds = 2e-3;
// No strategy gets cheaper for a larger batch (each does at least the work it
// did for a smaller one), so its time at the previous size is a floor. A
// strategy whose floor is this many times the best time at the current size
// cannot win there and is not run; the margin covers measurement noise.
constexpr double kSkipFactor = 3.0;
// A strategy that beats the previous size's winner takes over only if it wins
// again when both are timed once more, in turns, by this margin: one noisy
// timing (another process taking the core) must not flip a crossover, which
// a process would then keep for its whole life.
constexpr int kConfirmRounds = 3;
constexpr double kSwitchMargin = 1.05;

using Clock = std::chrono::steady_clock;

}  // namespace

std::optional<StrategyTable> StrategyTable::Measure(int64_t capacity, std::span<const UpdateStrategy> candidates,
                                                    const RunUpdate& run_update) {
  std::mt19937_64 rng(0x5eed);
  std::uniform_int_distribution<int64_t> leaf(0, capacity - 1);
  std::uniform_real_distribution<double> value(0.0, 1.0);

  // One pool of random leaves and values, drawn up front so that the timed
  // updates run back to back, as the replay issues them; consecutive updates
  // take consecutive slices, so no batch repeats until the pool wraps.
  const int64_t largest = std::min(capacity, kLargestMeasuredBatch);
  const int64_t pool = std::max(capacity, 4 * largest);
  std::vector<int64_t> indices(static_cast<size_t>(pool));
  std::vector<double> values(static_cast<size_t>(pool));
  for (double& v : values) v = value(rng);
  // Every leaf set first, as in a full replay buffer: an empty tree's +inf mins
  // make comparisons predictable and would flatter the strategies that do many.
  for (int64_t i = 0; i < capacity; ++i) indices[i] = i;
  if (!run_update(UpdateStrategy::kRebuild, std::span(indices).first(capacity), std::span(values).first(capacity))
           .ok()) {
    return std::nullopt;
  }
  bool failed = false;  // a failed update ends the measurement: its time would mean nothing
  for (int64_t& index : indices) index = leaf(rng);

  int64_t cursor = 0;
  auto one_update = [&](UpdateStrategy strategy, int64_t k) {
    if (cursor + k > pool) cursor = 0;
    const auto start = Clock::now();
    failed |= !run_update(strategy, std::span(indices).subspan(cursor, k), std::span(values).subspan(cursor, k)).ok();
    cursor += k;
    return std::chrono::duration<double>(Clock::now() - start).count();
  };

  auto settled_seconds = [&](UpdateStrategy strategy, int64_t k) {
    double spent = 0.0;
    for (int n = 0; n < kWarmupUpdates || spent < kWarmupSeconds; ++n) spent += one_update(strategy, k);
    std::vector<double> samples;
    for (spent = 0.0; samples.size() < kTimedUpdates || spent < kTimedSeconds;) {
      samples.push_back(one_update(strategy, k));
      spent += samples.back();
    }
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
  };

  // The challenger's and the incumbent's medians over kConfirmRounds more timings each, in turns.
  auto confirmed = [&](UpdateStrategy challenger, UpdateStrategy incumbent, int64_t k, std::string* line) {
    std::vector<double> challenger_seconds, incumbent_seconds;
    for (int round = 0; round < kConfirmRounds; ++round) {
      challenger_seconds.push_back(settled_seconds(challenger, k));
      incumbent_seconds.push_back(settled_seconds(incumbent, k));
    }
    const auto median = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    const double a = median(challenger_seconds), b = median(incumbent_seconds);
    *line += fmt::format(" (again: {} {:.1f}us, {} {:.1f}us)", UpdateStrategyName(challenger), a * 1e6,
                         UpdateStrategyName(incumbent), b * 1e6);
    return a * kSwitchMargin < b;
  };

  StrategyTable table;
  std::map<UpdateStrategy, double> floor_seconds;  // each strategy's time at the last size it ran
  UpdateStrategy winner = candidates.front();
  int bucket = 0;
  for (int64_t k = 1; k <= largest; k *= 2, ++bucket) {
    double best_seconds = std::numeric_limits<double>::infinity();
    const UpdateStrategy incumbent = winner;
    std::string line = fmt::format("k={}:", k);
    for (UpdateStrategy strategy : candidates) {
      const auto floor = floor_seconds.find(strategy);
      if (floor != floor_seconds.end() && floor->second > kSkipFactor * best_seconds) {
        line += fmt::format(" {} >{:.1f}us", UpdateStrategyName(strategy), floor->second * 1e6);
        continue;
      }
      const double seconds = settled_seconds(strategy, k);
      if (failed) return std::nullopt;
      floor_seconds[strategy] = seconds;
      line += fmt::format(" {} {:.1f}us", UpdateStrategyName(strategy), seconds * 1e6);
      if (seconds < best_seconds) {
        best_seconds = seconds;
        winner = strategy;
      }
    }
    if (bucket > 0 && winner != incumbent && !confirmed(winner, incumbent, k, &line)) winner = incumbent;
    if (failed) return std::nullopt;
    table.by_bucket_[bucket] = winner;
    table.description_ += line + fmt::format(" -> {}\n", UpdateStrategyName(winner));
  }
  // Batches larger than the largest measured size take its winner.
  std::fill(table.by_bucket_.begin() + bucket, table.by_bucket_.end(), winner);
  return table;
}

const StrategyTable* StrategyTable::Cached(std::string_view backend, int64_t capacity,
                                           const std::function<std::optional<StrategyTable>()>& measure) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int64_t>, StrategyTable> tables;
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<std::string, int64_t> key(backend, capacity);
  auto it = tables.find(key);
  if (it == tables.end()) {
    std::optional<StrategyTable> table = measure();
    if (!table) return nullptr;
    it = tables.emplace(key, std::move(*table)).first;
  }
  return &it->second;
}

}  // namespace perserve::tree
