#include "tree/cpu/strategy_table.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "tree/cpu/node_buffer.h"
#include "tree/cpu/update_strategies.h"

namespace perserve::tree {
namespace {

constexpr int64_t kLargestMeasuredBatch = int64_t{1} << 17;
constexpr int kRepetitions = 3;  // the fastest is kept: noise only ever adds time
constexpr UpdateStrategy kConcrete[] = {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild,
                                        UpdateStrategy::kSparse};

}  // namespace

StrategyTable StrategyTable::Measure(int64_t capacity) {
  NodeBuffer nodes(capacity);
  SparseScratch scratch(capacity);
  std::mt19937_64 rng(0x5eed);
  std::uniform_int_distribution<int64_t> leaf(0, capacity - 1);
  std::uniform_real_distribution<double> value(0.0, 1.0);
  std::vector<int64_t> indices;
  std::vector<double> values;

  StrategyTable table;
  UpdateStrategy winner = UpdateStrategy::kPerElement;
  int bucket = 0;
  for (int64_t k = 1; k <= std::min(capacity, kLargestMeasuredBatch); k *= 2, ++bucket) {
    double best_seconds = std::numeric_limits<double>::infinity();
    std::string line = fmt::format("k={}:", k);
    for (UpdateStrategy strategy : kConcrete) {
      double seconds = std::numeric_limits<double>::infinity();
      for (int rep = 0; rep <= kRepetitions; ++rep) {  // rep 0 warms caches and scratch
        indices.resize(static_cast<size_t>(k));
        values.resize(static_cast<size_t>(k));
        for (int64_t& index : indices) index = leaf(rng);
        for (double& v : values) v = value(rng);
        const auto start = std::chrono::steady_clock::now();
        UpdateWith(strategy, nodes.data(), capacity, indices, values, &scratch);
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        if (rep > 0) seconds = std::min(seconds, elapsed.count());
      }
      line += fmt::format(" {} {:.1f}us", UpdateStrategyName(strategy), seconds * 1e6);
      if (seconds < best_seconds) {
        best_seconds = seconds;
        winner = strategy;
      }
    }
    table.by_bucket_[bucket] = winner;
    table.description_ += line + fmt::format(" -> {}\n", UpdateStrategyName(winner));
  }
  std::fill(table.by_bucket_.begin() + bucket, table.by_bucket_.end(), winner);
  return table;
}

const StrategyTable& StrategyTable::ForCapacity(int64_t capacity) {
  static std::mutex mutex;
  static std::map<int64_t, StrategyTable> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = tables.find(capacity);
  if (it == tables.end()) it = tables.emplace(capacity, Measure(capacity)).first;
  return it->second;
}

}  // namespace perserve::tree
