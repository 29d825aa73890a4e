// Replay: prioritized experience replay semantics (Schaul et al. 2016) over a
// PriorityTree and a TransitionStore, as DESIGN.md's math contract states them.
//
// - Every item gets a 64-bit key, its insertion sequence number; its slot is
//   key mod capacity (a FIFO ring: the oldest item is overwritten first).
// - Priority policy (ReplayOptions): every priority p, given with an add or an
//   update, becomes q = p + priority_eps, and the tree leaf is q^alpha, never
//   below the smallest normal double (a power that underflows is clamped up to
//   it: tree/tree_algorithm.h), so a stored item's leaf is never 0 and the min
//   that weights divide by is never 0. p must be finite and >= 0, and with
//   eps 0 a zero is refused, unless drop_bad_priorities: then it gets that
//   smallest leaf (the server's --priority-eps defaults to 1e-6, as
//   Baselines' learners add, so a zero TD error is valid there).
// - The running max priority (over q values) is what an item added without a
//   priority gets (1.0 before any). Updates always raise it; an add's explicit
//   priorities raise it only with max_priority_from_adds. The default (off) is
//   Baselines': actors compute priorities with a stale copy of the network, and
//   one outlier from an actor would otherwise become the priority of every
//   later priority-less add. The learner's updates are the fresh ones.
// - Sampling is stratified: B equal segments of the total, one uniform draw in
//   each; the batch then comes back shuffled (a permutation keyed by seed and
//   call), not in ring order, so any sub-batch is an unbiased sample too.
// - IS weight w_i = (N * P(i))^-beta / max_w, max_w = (N * min_leaf / T)^-beta,
//   computed as (leaf_i / min_leaf)^-beta: every weight is <= 1 and an item
//   holding the smallest leaf gets exactly 1.
// - An add with a bad priority is rejected whole, naming the element, and
//   nothing of it is applied. An update with bad priorities is too, unless
//   drop_bad_priorities: then just those elements are dropped and counted.
// - A priority update for a key whose item was overwritten is dropped and
//   counted (stale); a key never issued is an error for the whole update.
// - Remove sets held items' leaves to 0: the tree never draws a 0 leaf and
//   its min covers positive leaves only, so a removed item is gone from
//   sampling and weights while its key and row stay in the ring until
//   overwritten. An update to a held key whose leaf is 0 (removed, or an
//   AddInPlace whose fill failed) is stale too: it would bring the item back.
//   size() counts held items; live_size() those whose leaf is not 0.
//
// Does no I/O. Not thread-safe: the service calls it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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
  // Added to every priority before the exponent; finite and >= 0. With eps > 0
  // a zero priority (a zero TD error) is valid and the item stays drawable.
  double priority_eps = 0.0;
  // An update's NaN, infinite or negative priorities are dropped and counted
  // instead of refusing the whole update (and with eps 0 a zero gets the
  // smallest leaf instead of refusing it).
  bool drop_bad_priorities = false;
  // Whether an add's explicit priorities raise the running max priority (see
  // above for why the default is no).
  bool max_priority_from_adds = false;
};

// What became of an update's elements: applied + stale + dropped = its size.
struct UpdateCounts {
  int64_t applied = 0;
  int64_t stale = 0;    // the key's item was overwritten: not applied
  int64_t dropped = 0;  // a bad priority under drop_bad_priorities: not applied
};

// SampleAt's fractions: each finite and in [0, 1) (the first that is not is
// named). The service checks a request with it before the request waits.
Status CheckFractions(std::span<const double> fractions);

struct SampleResult {
  std::vector<uint64_t> keys;
  std::vector<double> weights;        // importance-sampling weights, all <= 1
  std::vector<double> probabilities;  // P(i) = leaf / total
  std::vector<int64_t> slots;         // where the items sit in the store
  std::vector<double> leaves;         // the items' leaf values, (p + eps)^alpha
};

struct ReplayCounters {
  int64_t items_added = 0;
  int64_t items_sampled = 0;
  int64_t priorities_updated = 0;
  int64_t stale_updates_dropped = 0;
  int64_t priorities_dropped = 0;  // bad priorities dropped under drop_bad_priorities
};

// What a checkpoint keeps of a Replay beside its items (see Replay::State).
struct ReplayState {
  uint64_t next_key = 0;
  double max_priority = 1.0;
  uint64_t seed = 0;
  uint64_t samples_drawn = 0;  // the sampling generator's counter
  ReplayCounters counters;
};

class Replay {
 public:
  static Status Create(const ReplayOptions& options, Schema schema, std::unique_ptr<Replay>* replay);

  int64_t capacity() const { return options_.capacity; }
  double alpha() const { return options_.alpha; }
  int64_t size() const { return static_cast<int64_t>(std::min<uint64_t>(next_key_, options_.capacity)); }
  uint64_t next_key() const { return next_key_; }
  // The slot the next add writes first (its items go to this one and on, mod capacity).
  int64_t next_slot() const { return static_cast<int64_t>(next_key_ % static_cast<uint64_t>(options_.capacity)); }
  // Items held whose leaf is not 0 (drawable): size() less the removed ones,
  // and those whose fill failed, still in the ring. O(1).
  int64_t live_size() const { return size() - zero_leaves_; }
  // An add's count: in [1, capacity] (the error says so).
  Status CheckAddCount(int64_t count) const;
  // Every check Add and AddInPlace make before changing anything: the count,
  // priorities empty or `count` long, each priority under the policy, no
  // (p + eps)^alpha past the tree's limit, and the tree's total staying below
  // tree/tree_validation.h's kMaxTreeTotal with these items added (an upper
  // bound: leaves the add would replace are read only near the limit). So
  // when it passes, an Add of `count` items with these priorities (and
  // columns CheckBatch accepts) succeeds unless the tree's device fails, also
  // after any Remove (which only lowers the total). Usually O(count) with one
  // pow; O(count log capacity) near the total's limit.
  Status CheckAdd(int64_t count, std::span<const double> priorities) const;
  double max_priority() const { return max_priority_; }
  const ReplayCounters& counters() const { return counters_; }
  const store::TransitionStore& store() const { return store_; }
  const tree::PriorityTree& tree() const { return *tree_; }

  // Stores `count` items (bulk: each column's count items, column after
  // column) with keys *first_key ...; priorities empty or `count` long.
  Status Add(int64_t count, std::span<const std::byte> columns, std::span<const double> priorities,
             uint64_t* first_key);

  // Add with the columns written by `fill` straight into the store: once
  // every check has passed and the tree holds the new leaves, `fill` gets the
  // regions the items go to (TransitionStore::Regions: the wire layout's
  // order) and writes them. An error before `fill` changes nothing (fill is
  // not called); if fill fails, the items are stored with leaf 0 (never
  // sampled; their keys are issued) and its error is returned.
  using Fill = std::function<Status(std::span<const std::span<std::byte>> regions)>;
  Status AddInPlace(int64_t count, std::span<const double> priorities, const Fill& fill, uint64_t* first_key);

  // Draws `batch_size` items proportional to their leaves, in shuffled order.
  // Needs size() > 0 and beta finite and >= 0. On one backend, the same seed
  // and the same calls give the same batches. O(batch_size log capacity).
  Status Sample(int64_t batch_size, double beta, SampleResult* result);

  // Draws one item per fraction: the one at mass fractions[i] * total (a
  // shard's part of a sample stratified over several replays; the learner
  // drew the fractions), in the fractions' order. Fills keys, slots, leaves
  // and probabilities, not weights (the learner computes them over every
  // shard). Each fraction finite and in [0, 1); needs size() > 0. Takes no
  // value from the sampling generator.
  Status SampleAt(std::span<const double> fractions, SampleResult* result);

  // The state a checkpoint saves beside the items: keys, max priority, the
  // sampling generator (seed and counter: the samples after a restore are
  // those this replay would have drawn), the counters.
  ReplayState State() const;
  // The key of the oldest item held (next_key() - size()).
  uint64_t oldest_key() const { return next_key_ - static_cast<uint64_t>(size()); }

  // Restoring from a checkpoint, into a replay just created with the same
  // schema and capacity: RestoreItems for every held item (the keys
  // state.next_key - size .. state.next_key - 1, in any chunks; bulk column
  // after column, leaves the tree values as saved), then RestoreState. The
  // tree is rebuilt from the same leaves, so every node is bit-identical.
  Status RestoreItems(uint64_t first_key, int64_t count, std::span<const std::byte> columns,
                      std::span<const double> leaves);
  Status RestoreState(const ReplayState& state);

  // Sets the leaves of the held items with these keys (oldest_key() <= key <
  // next_key()) to 0: never drawn again, not in the min, not live; later
  // updates to them are stale. Keys not held, and items already at 0, are
  // ignored (repeats too). Fails only where the tree's device does, and then
  // nothing changed. O(k log capacity), one batched tree update.
  Status Remove(std::span<const uint64_t> keys);

  // Sets the priorities of the items with these keys (repeats: the last
  // applied wins) and says what became of each element in *counts: a key
  // overwritten, or held with leaf 0 (removed, or its fill failed), is stale.
  // On an error nothing is applied and *counts is untouched: sizes differ, a
  // key was never issued (NotFound), a bad priority without
  // drop_bad_priorities, or a power past the tree's limits (in either mode).
  Status UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                          UpdateCounts* counts);

 private:
  Replay(const ReplayOptions& options, Schema schema, std::unique_ptr<tree::PriorityTree> tree);

  // Whether p is refused: NaN, infinite, negative, or (unless
  // drop_bad_priorities) p + eps == 0. The tree checks the rest: that
  // (p + eps)^alpha does not overflow.
  bool IsBadPriority(double p) const;
  Status BadPriority(double p, size_t position) const;
  uint64_t KeyAtSlot(int64_t slot) const;

  ReplayOptions options_;
  store::TransitionStore store_;
  std::unique_ptr<tree::PriorityTree> tree_;
  uint64_t next_key_ = 0;
  double max_priority_ = 1.0;
  ReplayCounters counters_;
  // Per slot, 1 where the slot holds an item whose leaf is 0 (removed, a
  // failed fill, or restored so); never 1 for a slot holding no item.
  // zero_leaves_ counts the ones. Kept here, not read from the tree, so
  // neither adds nor updates need a (device) read of leaves.
  std::vector<uint8_t> zero_leaf_;
  int64_t zero_leaves_ = 0;
  uint64_t samples_drawn_ = 0;  // the sampling generator's counter: one value per Sample call
  // Scratch reused across requests, so the hot path does not allocate once warm.
  std::vector<int64_t> slots_;
  std::vector<double> leaves_;            // sampled leaves' values
  std::vector<double> shifted_;           // the priorities plus eps that go to the tree
  std::vector<std::span<std::byte>> regions_;
};

}  // namespace perserve::replay
