// Replay: a table's items and their priorities (prioritized experience
// replay, Schaul et al. 2016, as docs/design.md's math states it), over
// a PriorityTree and a TransitionStore of the items' own rows (in a server:
// each item's step key and item columns; the steps live in the StepStore).
//
// - Every item gets a 64-bit key, its insertion sequence number, and takes
//   a free slot (a tree leaf and a row of the store): the slot its items
//   last freed first, else one never used, so the store's memory grows with
//   the items held, not with the capacity. A KeyIndex maps keys to slots.
// - At most `capacity` items are held. An item leaves when it is removed
//   (Remove, or an Add's `removed`: its steps were overwritten), when an
//   add would hold more than `capacity` (then the remover picks: by default
//   the oldest items, smallest keys, first; or the lowest priority first,
//   the older of equals first), or, with max_times_sampled = k > 0, right
//   after the draw that sampled it the k-th time. A removed item is gone:
//   its slot is free, its leaf 0, and an update of its key is stale.
// - The sampler (ReplayOptions::sampler, a table::SelectorKind): prioritized
//   by default (the tree below, as described here), or uniform, fifo, lifo,
//   max_heap or min_heap (table/selector.h says each one's draw; the tree
//   is kept for every sampler: it holds the leaves a checkpoint saves).
//   Importance weights are 1 for every sampler but prioritized: a uniform
//   draw has P = 1/N, so (N * P)^-beta = 1; fifo, lifo and the heaps draw
//   deterministically, not by a distribution to correct for.
//   Beside the tree, a non-default sampler, remover or max_times_sampled
//   costs its selectors' memory (table/selector.h) and 8 bytes a slot for
//   each item's priority (p + eps, which the uniform, fifo and lifo
//   selectors do not keep), 8 more for its times sampled; the default
//   options allocate none of it and take none of its branches' work.
// - Priority policy (ReplayOptions): every priority p, given with an add or an
//   update, becomes q = p + priority_eps, and the tree leaf is q^alpha, never
//   below the smallest normal double (a power that underflows is clamped up to
//   it: tree/tree_algorithm.h), so a held item's leaf is never 0 and the min
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
//   call), so any sub-batch is an unbiased sample too.
// - IS weight w_i = (N * P(i))^-beta / max_w, max_w = (N * min_leaf / T)^-beta,
//   computed as (leaf_i / min_leaf)^-beta: every weight is <= 1 and an item
//   holding the smallest leaf gets exactly 1.
// - An add with a bad priority is rejected whole, naming the element, and
//   nothing of it is applied. An update with bad priorities is too, unless
//   drop_bad_priorities: then just those elements are dropped and counted.
// - A priority update for a key no longer held is dropped and counted
//   (stale); a key never issued is an error for the whole update.
//
// Does no I/O. Not thread-safe: the service calls it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "replay/key_index.h"
#include "store/transition_store.h"
#include "table/heap_selector.h"
#include "table/selector.h"
#include "tree/priority_tree.h"

namespace perserve::replay {

// Which held item leaves when an add would hold more than the capacity.
enum class RemoverKind {
  kOldestFirst,          // the smallest key (a FIFO selector)
  kLowestPriorityFirst,  // the lowest priority, the older of equals first (a min-heap)
};

struct ReplayOptions {
  int64_t capacity = int64_t{1} << 21;  // items held at most
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
  // How Sample draws (see above). UpdatePriorities is refused for uniform,
  // fifo and lifo; SampleAt for every sampler but prioritized.
  table::SelectorKind sampler = table::SelectorKind::kPrioritized;
  RemoverKind remover = RemoverKind::kOldestFirst;
  // An item leaves right after its k-th draw (0: never); >= 0. With k > 0,
  // Sample draws one item at a time and SampleAt is refused.
  int64_t max_times_sampled = 0;
};

// What became of an update's elements: applied + stale + dropped = its size.
struct UpdateCounts {
  int64_t applied = 0;
  int64_t stale = 0;    // the key's item is no longer held: not applied
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
  // With max_times_sampled: the slots of the items this draw sampled their
  // last time, which left the replay (their rows stay until a later Add
  // takes the slot); else empty.
  std::vector<int64_t> removed_slots;
};

struct ReplayCounters {
  int64_t items_added = 0;
  int64_t items_sampled = 0;
  int64_t priorities_updated = 0;
  int64_t stale_updates_dropped = 0;
  int64_t priorities_dropped = 0;  // bad priorities dropped under drop_bad_priorities
};

// What a checkpoint of a replay with a sampler other than prioritized, the
// lowest-priority remover or max_times_sampled keeps beside its items' leaves
// (Replay::Selectors, RestoreSelectors). Empty for the default options.
struct SelectorState {
  std::vector<uint64_t> keys;           // every held key, ascending
  std::vector<double> priorities;       // per key: its priority, p + eps
  std::vector<int64_t> times_sampled;   // per key, with max_times_sampled > 0; else empty
  std::vector<uint64_t> sampler_order;  // the held keys in the sampler's rebuild order; empty for prioritized
  std::vector<uint64_t> remover_order;  // the same for the lowest-priority remover; empty for oldest first
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
  // The options it was created with (capacity, alpha, sampler, remover, ...).
  const ReplayOptions& options() const { return options_; }
  // Items held: all of them drawable. O(1).
  int64_t size() const { return size_; }
  // The draws a Sample may still make: with max_times_sampled = k, the sum
  // over held items of k minus their times sampled; else unbounded (-1).
  int64_t draws_left() const { return options_.max_times_sampled > 0 ? draws_left_ : -1; }
  uint64_t next_key() const { return next_key_; }
  // Slots ever used: [0, slots_used()) may hold items, the rest never have.
  int64_t slots_used() const { return fresh_; }
  // The key of the item at `slot`, or kNoKey when it holds none.
  static constexpr uint64_t kNoKey = ~uint64_t{0};
  uint64_t KeyAt(int64_t slot) const { return slot_key_[static_cast<size_t>(slot)]; }
  // The slot of a held key, or -1. O(1) expected.
  int64_t SlotOf(uint64_t key) const { return index_.Find(key); }
  // The oldest key held (the oldest-first remover's next), or next_key() when empty.
  uint64_t oldest_key() const;
  // An add's count: in [1, capacity] (the error says so).
  Status CheckAddCount(int64_t count) const;
  // Every check Add makes before changing anything: the count, priorities
  // empty or `count` long, each priority under the policy, no (p + eps)^alpha
  // past the tree's limit, and the tree's total staying below
  // tree/tree_validation.h's kMaxTreeTotal with these items added (an upper
  // bound: leaves the add would replace are read only near the limit). So
  // when it passes, an Add of `count` items with these priorities (and rows
  // the store accepts) succeeds unless the tree's device fails. Usually
  // O(count) with one pow.
  Status CheckAdd(int64_t count, std::span<const double> priorities) const;
  double max_priority() const { return max_priority_; }
  const ReplayCounters& counters() const { return counters_; }
  const store::TransitionStore& store() const { return store_; }
  const tree::PriorityTree& tree() const { return *tree_; }

  // The slots an Add of `count` items after removing `removed` would write,
  // in the order its items take them (a checkpoint being written keeps the
  // rows held there first), and (if `pushed_out`) the slots of the held
  // items the remover would take, in the order it takes them. No change.
  // O(count + removed + the items the oldest-first remover takes); the
  // lowest-priority one takes O((removed + taken) log(removed + taken)).
  void PlanSlots(std::span<const uint64_t> removed /* distinct */, int64_t count, std::vector<int64_t>* slots,
                 std::vector<int64_t>* pushed_out = nullptr) const;

  // Removes the held items among `removed` (distinct keys; those not held
  // are ignored), then stores
  // `count` items (rows: each store column's count rows, column after column)
  // with keys *first_key ..., the remover taking items out if more than
  // capacity would be held; priorities empty or `count` long. One tree
  // update where the new items take the removed items' slots. Checked
  // whole first (CheckAdd, the rows' bytes): on an error nothing changes.
  Status Add(int64_t count, std::span<const std::byte> rows, std::span<const double> priorities,
             uint64_t* first_key, std::span<const uint64_t> removed = {});

  // Draws `batch_size` items, needing size() > 0 and beta finite and >= 0.
  // On one backend, the same seed and the same calls give the same batches.
  // The prioritized sampler draws proportional to the leaves, stratified (one
  // draw in each of batch_size equal segments of the total), the batch then
  // shuffled; O(batch_size log capacity). The others draw through their
  // selector, uniform at independent uniform fractions of the replay's
  // generator, the rest deterministically (a fifo table without
  // max_times_sampled gives its oldest item batch_size times); weights 1.
  // With max_times_sampled = k > 0 the draws are made one at a time, and an
  // item drawn the k-th time leaves before the next draw (its row stays in
  // its slot until a later Add takes the slot): a fifo table with k = 1 is a
  // queue, a batch is its oldest batch_size items, oldest first. Such a call
  // needs batch_size draws left in the table (each held item has k minus its
  // times sampled), else FailedPrecondition and nothing changes: a batch is
  // never short.
  Status Sample(int64_t batch_size, double beta, SampleResult* result);

  // Draws one item per fraction: the one at mass fractions[i] * total (a
  // shard's part of a sample stratified over several replays; the learner
  // drew the fractions), in the fractions' order. Fills keys, slots, leaves
  // and probabilities, not weights (the learner computes them over every
  // shard). Each fraction finite and in [0, 1); needs size() > 0. Takes no
  // value from the sampling generator. FailedPrecondition for a sampler other
  // than prioritized or with max_times_sampled.
  Status SampleAt(std::span<const double> fractions, SampleResult* result);

  // The state a checkpoint saves beside the items: keys, max priority, the
  // sampling generator (seed and counter: the samples after a restore are
  // those this replay would have drawn), the counters.
  ReplayState State() const;

  // Restoring from a checkpoint, into a replay just created with the same
  // schema and capacity: RestoreItems for every held item (in any order and
  // chunks; each its key, below next key, its slot, its leaf as saved, its
  // row, column after column), then RestoreState. The tree is rebuilt from
  // the same leaves in the same slots, so every node is bit-identical and so
  // are the samples. InvalidArgument for a slot out of range or taken, a key
  // held twice, a leaf that is not a held item's.
  Status RestoreItems(std::span<const uint64_t> keys, std::span<const int64_t> slots,
                      std::span<const std::byte> rows, std::span<const double> leaves);
  Status RestoreState(const ReplayState& state);
  // Then, to take slots as the checkpointed replay would: the slots used
  // then (slots_used) and its free slots, the one taken last first
  // (free_slots). InvalidArgument unless every slot below `slots_used` is
  // held or listed, once. Without it the lowest free slot is taken first.
  Status RestoreFreeSlots(int64_t slots_used, std::span<const int64_t> free_slots);
  // Last, for a replay whose Selectors() were not empty: each held item's
  // priority and times sampled, and the sampler's and remover's orders.
  // InvalidArgument unless every list names every held key once (a priority
  // finite and > 0, a count in [0, max_times_sampled)); on an error the
  // replay is not usable.
  Status RestoreSelectors(const SelectorState& state);
  // What RestoreSelectors needs; empty for the default options. O(n log n).
  SelectorState Selectors() const;
  // The free slots below slots_used(), the next one taken last.
  std::span<const int64_t> free_slots() const { return free_; }

  // Removes the held items with these keys: their slots are free, their
  // leaves 0, later updates to them stale. Keys not held (repeats too) are
  // ignored. Fails only where the tree's device does, and then nothing
  // changed. O(k log capacity), one batched tree update.
  Status Remove(std::span<const uint64_t> keys);

  // Sets the priorities of the items with these keys (repeats: the last
  // applied wins) and says what became of each element in *counts: a key
  // no longer held is stale. On an error nothing is applied and *counts is
  // untouched: sizes differ, a key was never issued (NotFound), a bad
  // priority without drop_bad_priorities, or a power past the tree's limits
  // (in either mode); FailedPrecondition for a uniform, fifo or lifo
  // sampler, which has no use for priorities.
  Status UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                          UpdateCounts* counts);

 private:
  Replay(const ReplayOptions& options, Schema schema, std::unique_ptr<tree::PriorityTree> tree);

  // Whether p is refused: NaN, infinite, negative, or (unless
  // drop_bad_priorities) p + eps == 0. The tree checks the rest: that
  // (p + eps)^alpha does not overflow.
  bool IsBadPriority(double p) const;
  Status BadPriority(double p, size_t position) const;
  // Takes the held item `key` at `slot` out (its slot freed; the tree not touched).
  void Unlink(uint64_t key, int64_t slot);
  // The slot the next item takes (and takes it).
  int64_t TakeSlot();
  // Starts the reads of these slots' keys (KeyAt), so a batch's cache
  // misses overlap instead of coming one by one.
  void PrefetchKeys(std::span<const int64_t> slots) const {
    for (const int64_t slot : slots) __builtin_prefetch(&slot_key_[static_cast<size_t>(slot)]);
  }
  // The oldest entry of order_ still held, dropping the others before it.
  void DropRemovedFromOrder();

  // The selectors' side (replay_selectors.cc), used only when has_selectors_.
  // Records new items (in slot order of the add) with their priorities.
  Status InsertIntoSelectors(std::span<const int64_t> slots, std::span<const double> priorities);
  // Forgets the item at `slot` (before Unlink frees it).
  void DeleteFromSelectors(int64_t slot);
  // The remover's next `count` slots, those in `skipped` (sorted) passed over.
  void PlanLowestPriority(int64_t count, std::span<const int64_t> skipped, std::vector<int64_t>* slots) const;
  // Sample for a non-prioritized sampler or max_times_sampled.
  Status SampleThroughSelector(int64_t batch_size, double beta, SampleResult* result);
  // The fraction of the call's draw i (stratified for prioritized).
  double DrawFraction(uint64_t counter, int64_t draw, int64_t batch_size) const;

  ReplayOptions options_;
  store::TransitionStore store_;
  std::unique_ptr<tree::PriorityTree> tree_;
  uint64_t next_key_ = 0;
  int64_t size_ = 0;
  double max_priority_ = 1.0;
  ReplayCounters counters_;
  std::vector<uint64_t> slot_key_;  // per slot: its item's key, or kNoKey
  KeyIndex index_;
  std::vector<int64_t> free_;       // freed slots; the last freed is taken first
  int64_t fresh_ = 0;               // slots [fresh_, capacity) were never used
  std::deque<uint64_t> order_;      // keys in insertion order, removed ones among them until dropped
  int64_t removed_in_order_ = 0;    // of order_'s keys, those no longer held
  uint64_t samples_drawn_ = 0;      // the sampling generator's counter: one value per Sample call
  // Set for a non-default sampler, remover or max_times_sampled.
  bool has_selectors_ = false;
  // Set for a non-prioritized sampler or max_times_sampled: Sample draws through SampleThroughSelector.
  bool draws_through_selector_ = false;
  std::unique_ptr<table::Selector> sampler_;         // null for prioritized: the tree draws
  std::unique_ptr<table::HeapSelector> remover_;     // null for oldest first: order_ is the remover
  std::vector<double> priorities_;                   // per slot, with has_selectors_: p + eps
  std::vector<int64_t> times_sampled_;               // per slot, with max_times_sampled > 0
  int64_t draws_left_ = 0;                           // with max_times_sampled: the sum of k - times over held items
  // Scratch reused across requests, so the hot path does not allocate once warm.
  std::vector<int64_t> slots_;
  std::vector<int64_t> found_;
  std::vector<int64_t> zeroed_;
  std::vector<double> leaves_;
  std::vector<double> shifted_;
  mutable std::vector<int64_t> plan_free_, plan_sorted_;
};

}  // namespace perserve::replay
