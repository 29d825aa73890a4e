// TableReference: a plain reference for what a table's Replay decides by
// its options (replay.h, table/selector.h): which held item each draw of a
// deterministic sampler gives, which items the remover takes when the table
// is full, when max_times_sampled takes an item out, and each item's
// priority (p + eps, or the running max priority for an item added
// without one). Kept by key in maps and chosen by scans: no heaps, no
// lists, no slots, so it shares nothing with the code it checks.
//   fifo, lifo   the oldest (smallest key) or newest held item;
//   max_heap,    the highest or lowest priority; of equals, the one whose
//   min_heap     priority was set first (an add, or an update: an update,
//                even to the same value, sends it behind its equals);
//   remover      oldest first (smallest key), or the lowest priority, the
//                older (smaller key) of equals first;
//   uniform and prioritized draw at random: a draw is any held item, and
//   a uniform one has probability 1 / (items held then).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "replay/replay.h"
#include "table/selector.h"

namespace perserve::service::simulation {

class TableReference {
 public:
  explicit TableReference(const replay::ReplayOptions& options) : options_(options) {}

  const replay::ReplayOptions& options() const { return options_; }
  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  bool Held(uint64_t key) const { return items_.count(key) != 0; }
  double max_priority() const { return max_priority_; }
  // The draws the table may still make with max_times_sampled (else -1).
  int64_t draws_left() const {
    if (options_.max_times_sampled == 0) return -1;
    int64_t left = 0;
    for (const auto& [key, item] : items_) left += options_.max_times_sampled - item.times_sampled;
    return left;
  }
  // Each held key's priority and times sampled, ascending (Replay::Selectors' lists).
  std::vector<uint64_t> keys() const {
    std::vector<uint64_t> keys;
    for (const auto& [key, item] : items_) keys.push_back(key);
    return keys;
  }
  double priority(uint64_t key) const { return items_.at(key).priority; }
  int64_t times_sampled(uint64_t key) const { return items_.at(key).times_sampled; }

  // An item left (its steps left the ring); a key not held is ignored.
  void Remove(uint64_t key) { items_.erase(key); }

  // The keys the remover takes, in order, for `count` new items to fit (and takes them).
  std::vector<uint64_t> PushOut(int64_t count) {
    std::vector<uint64_t> taken;
    while (!items_.empty() && size() + count > options_.capacity) {
      auto out = items_.begin();  // the oldest
      if (options_.remover == replay::RemoverKind::kLowestPriorityFirst) {
        for (auto it = items_.begin(); it != items_.end(); ++it) {
          if (it->second.priority < out->second.priority) out = it;  // strictly lower: the older of equals stays chosen
        }
      }
      taken.push_back(out->first);
      items_.erase(out);
    }
    return taken;
  }

  // One add's new items, keys first_key ..., in order, with their
  // priorities p (empty: each gets the running max priority).
  void Add(uint64_t first_key, int64_t count, const std::vector<double>& priorities) {
    double largest = 0.0;
    for (int64_t i = 0; i < count; ++i) {
      const double q = priorities.empty() ? max_priority_ : priorities[static_cast<size_t>(i)] + options_.priority_eps;
      items_[first_key + static_cast<uint64_t>(i)] = Item{q, next_set_++, 0};
      largest = std::max(largest, q);
    }
    if (options_.max_priority_from_adds && count > 0) max_priority_ = std::max(max_priority_, largest);
  }

  // What a draw of a deterministic sampler gives now (none for prioritized
  // and uniform, or when nothing is held).
  std::optional<uint64_t> Next() const {
    if (items_.empty()) return std::nullopt;
    using Kind = table::SelectorKind;
    switch (options_.sampler) {
      case Kind::kPrioritized:
      case Kind::kUniform:
        return std::nullopt;
      case Kind::kFifo:
        return items_.begin()->first;
      case Kind::kLifo:
        return items_.rbegin()->first;
      case Kind::kMaxHeap:
      case Kind::kMinHeap: {
        const bool max = options_.sampler == Kind::kMaxHeap;
        auto best = items_.begin();
        for (auto it = items_.begin(); it != items_.end(); ++it) {
          const double p = it->second.priority, b = best->second.priority;
          if ((max ? p > b : p < b) || (p == b && it->second.set < best->second.set)) best = it;
        }
        return best->first;
      }
    }
    return std::nullopt;
  }

  // A draw gave `key` (held): with max_times_sampled = k, its k-th draw takes it out.
  void Drawn(uint64_t key) {
    Item& item = items_.at(key);
    if (options_.max_times_sampled > 0 && ++item.times_sampled == options_.max_times_sampled) items_.erase(key);
  }

  // An update's applied elements, in order: each held key's priority
  // becomes p + eps (set now, behind its equals); the running max rises to
  // the largest of them.
  void Update(const std::vector<std::pair<uint64_t, double>>& applied) {
    double largest = 0.0;
    for (const auto& [key, p] : applied) {
      Item& item = items_.at(key);
      item.priority = p + options_.priority_eps;
      item.set = next_set_++;
      largest = std::max(largest, item.priority);
    }
    max_priority_ = std::max(max_priority_, largest);
  }

 private:
  struct Item {
    double priority = 0.0;   // p + eps
    uint64_t set = 0;        // when its priority was set (the heap sampler's ties)
    int64_t times_sampled = 0;
  };
  replay::ReplayOptions options_;
  std::map<uint64_t, Item> items_;  // by key: the oldest first
  double max_priority_ = 1.0;
  uint64_t next_set_ = 0;
};

}  // namespace perserve::service::simulation
