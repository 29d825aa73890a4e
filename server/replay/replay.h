// Replay: prioritized experience replay semantics (Schaul et al. 2016) over a
// PriorityTree and a TransitionStore, as DESIGN.md's math contract states them.
//
// - Every item gets a 64-bit key, its insertion sequence number; its slot is
//   key mod capacity (a FIFO ring: the oldest item is overwritten first).
// - The tree leaf of an item is p^alpha. An item added without a priority gets
//   the largest priority seen so far (1.0 before any).
// - Sampling is stratified: B equal segments of the total, one uniform draw in
//   each. IS weight w_i = (N * P(i))^-beta / max_w, max_w = (N * min_leaf / T)^-beta.
// - Priorities must be finite and > 0. A request with a bad element is rejected
//   whole, naming the element, and nothing of it is applied.
// - A priority update for a key whose item was overwritten is dropped and
//   counted; a key never issued is an error.
//
// Does no I/O. Not thread-safe: the service calls it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "store/transition_store.h"
#include "tree/priority_tree.h"

namespace perserve::replay {

struct ReplayOptions {
  int64_t capacity = int64_t{1} << 21;
  double alpha = 0.6;
  tree::Device device = tree::Device::kAuto;
  uint64_t seed = 0x5eed;
  bool prefault_store = false;  // see store::TransitionStore
};

struct SampleResult {
  std::vector<uint64_t> keys;
  std::vector<double> weights;        // importance-sampling weights, max 1
  std::vector<double> probabilities;  // P(i) = leaf / total
  std::vector<int64_t> slots;         // where the items sit in the store
};

struct ReplayCounters {
  int64_t items_added = 0;
  int64_t items_sampled = 0;
  int64_t priorities_updated = 0;
  int64_t stale_updates_dropped = 0;
};

class Replay {
 public:
  static Status Create(const ReplayOptions& options, Schema schema, std::unique_ptr<Replay>* replay);

  int64_t capacity() const { return options_.capacity; }
  int64_t size() const { return static_cast<int64_t>(std::min<uint64_t>(next_key_, options_.capacity)); }
  uint64_t next_key() const { return next_key_; }
  double max_priority() const { return max_priority_; }
  const ReplayCounters& counters() const { return counters_; }
  const store::TransitionStore& store() const { return store_; }
  const tree::PriorityTree& tree() const { return *tree_; }

  // Stores `count` items (bulk: each column's count items, column after
  // column) with keys *first_key ...; priorities empty or `count` long.
  Status Add(int64_t count, std::span<const std::byte> columns, std::span<const double> priorities,
             uint64_t* first_key);

  // Draws `batch_size` items proportional to p^alpha. Needs size() > 0 and
  // beta finite and >= 0. O(batch_size log capacity).
  Status Sample(int64_t batch_size, double beta, SampleResult* result);

  // Sets the priorities of the items with these keys (repeats: the last wins).
  Status UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities, int64_t* applied,
                          int64_t* stale);

 private:
  Replay(const ReplayOptions& options, Schema schema, std::unique_ptr<tree::PriorityTree> tree);

  // Fails, naming the first, on a priority that is not finite and > 0 (the
  // tree checks the rest: that p^alpha does not overflow).
  static Status CheckPriorities(std::span<const double> priorities);
  uint64_t KeyAtSlot(int64_t slot) const;

  ReplayOptions options_;
  store::TransitionStore store_;
  std::unique_ptr<tree::PriorityTree> tree_;
  uint64_t next_key_ = 0;
  double max_priority_ = 1.0;
  ReplayCounters counters_;
  uint64_t samples_drawn_ = 0;  // the sampling generator's counter: one value per Sample call
  // Scratch reused across requests, so the hot path does not allocate once warm.
  std::vector<int64_t> slots_;
  std::vector<double> leaves_;            // sampled leaves' values
  std::vector<double> live_priorities_;  // an update's priorities for keys not yet overwritten
};

}  // namespace perserve::replay
