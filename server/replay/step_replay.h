// StepReplay: a replay rank's one table over its one step store. Actors
// append steps to their own stream; each step is stored once
// (store::StepStore's ring); items are views over steps, kept with their
// priorities in a Replay; a sample assembles the table's item layout from
// the ring. A transition is the one-step case: an add is an append whose
// steps each make the item over themselves, and a sample returns the step's
// own columns (sent straight from the ring where the transport can).
//
// Steps and episodes (n-step items and sequences)
// - Stream s (0 .. streams-1) appends steps with indices 0, 1, ... Every step
//   has every step column, among them a scalar float32/float64 reward and a
//   scalar uint8 done: 0 (the episode goes on), 1 (terminal: the episode
//   ended with this step's action) or 2 (truncated: the episode was cut off,
//   by a time limit say, and this step is its bootstrap step, holding the
//   observation it was cut off at; its other columns are returned but its
//   reward is never summed, and no item starts at it). Either nonzero value
//   marks the episode's last step; the stream's next step begins a new
//   episode. Episodes never cross: n-step returns stop at the end, stacks put
//   zero frames before the episode's first step (Dopamine's convention),
//   sequences zero and mask steps past the end. Transitions have no
//   episodes: their steps' columns are whatever the schema says.
// - A stacked column (StepOptions::stacks, depth k > 1) comes back with a new
//   last axis of k frames, oldest first: the frames of steps t-k+1 .. t, those
//   before t's episode's first step all zeros. An 84x84 frame stacks to
//   (84, 84, 4).
//
// Items (one layout per table). In each layout below, "c" runs over the step
// columns in step-schema order; the item columns come last, as sent.
// - kTransition: the item at step t is step t: c (every column) as appended.
// - kNStep (n >= 1, discount G in [0, 1]): the item at step t. e is the
//   episode's last step if it ends at some e <= t+n; then n' = e-t+1 when e
//   is terminal (e <= t+n-1), n' = e-t when e is a bootstrap step; else
//   n' = n. Creatable once step t+n is appended, or once the episode ended at
//   e <= t+n. Layout:
//     c (every column but reward and done): c.shape, or c.shape + [k] stacked;
//     return   float64: R = 0; g = 1; for j in 0 .. n'-1: R += g * r_{t+j};
//              g *= G (in double, rewards converted to double);
//     discount float64: g (= G^n') unless a terminal step is among the n'
//              steps, else 0 (a truncated episode bootstraps: g);
//     next_c   for each column named in stacks, in step-schema order: c's
//              shape, the value (stacked the same way) at step t+n' (a
//              truncated episode's bootstrap step when it is within n); all
//              zeros when the discount is 0 (the episode ended, or G^n' is 0).
//   With no stacks given and a step column named obs, stacks is obs:1 (so
//   next_obs comes back); kNStep with no stacked column at all is an error.
// - kSequence (length L >= 1, period P in [1, L]): the item at step t covers
//   t .. t+L-1 (a bootstrap step among them is a step like the others, with
//   mask 1 and done 2). t minus its episode's first index must be a multiple
//   of P. Creatable once step t+L-1 is appended, or once the episode ended at some
//   e < t+L-1. Layout:
//     c (every column, reward and done too): [L] + c.shape (+ [k] stacked),
//              steps past the episode's end all zeros;
//     mask     uint8 [L]: 1 for steps t+j <= e (every step when the episode
//              does not end within), else 0.
// - The items' Replay stores per item (stored_schema): step int64 (the global
//   key of step t), then the item columns.
// - One item per step: an item over a step the table holds an item over
//   already is refused (naming the step and the key it has).
//
// An item leaves when a step it needs leaves the ring, or when the table is
// full (its Replay's capacity: the oldest items leave first). Eviction by
// steps is exact. An item's steps all belong to one stream, where keys grow
// with the index, and the ring drops steps in key order; so the item's
// earliest needed step, max(episode start, t-K+1) for the deepest stack K,
// leaves first. Each step slot heads a list of the items whose earliest step
// it is (linked through their item slots, both ways, so an item the FIFO
// remover takes leaves its list); when an append pushes the step out of the
// ring, every item on it leaves the items' Replay there, before the new
// items come in, in the same tree update. So every item the tree can draw
// has all its steps in the ring.
//
// Memory: the step columns in page memory (untouched until written), plus 40
// bytes a step slot (StepStore's 32, a list head) and 8 a held step; per item
// slot the Replay's tree, key and store row (the 8-byte step key and the item
// columns, touched only for slots items have used) and 24 bytes of links.
//
// Does no I/O. Not thread-safe: the service calls it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "replay/assembly_pool.h"
#include "replay/replay.h"
#include "replay/step_layout.h"
#include "store/step_store.h"

namespace perserve::replay {

struct StepOptions {
  enum class Kind { kTransition, kNStep, kSequence };
  Kind kind = Kind::kNStep;
  int n_step = 1;                 // kNStep: n >= 1
  double discount = 0.99;         // kNStep: finite, in [0, 1]
  int sequence_length = 0;        // kSequence: L >= 1
  int sequence_period = 0;        // kSequence: P in [1, L]
  std::vector<std::pair<std::string, int>> stacks;  // step column -> depth >= 1 (depth 1: not stacked)
  std::string reward_column = "reward";  // scalar float32 or float64 step column (not for kTransition)
  std::string done_column = "done";      // scalar uint8 step column: 0, 1 (terminal) or 2 (truncated: bootstrap step)
  std::vector<Column> item_columns;      // columns an actor sends with each item (e.g. a recurrent state)
  int64_t step_capacity = int64_t{1} << 21;  // steps the ring holds (all streams together)
  int streams = 1;                        // stream ids are 0 .. streams-1 (the service's client ids)
  bool prefault = false;                  // write every page of the step ring at start (--prefault-store)
};

// The ring's free slots past its newest step (StepStore's slack), where an
// append of up to this many steps is received before it is checked: about
// 32 MiB of steps, 256 to 65536 of them, and no more than the ring holds.
int64_t StepSlack(const Schema& step_schema, int64_t step_capacity);

// Checks options against the step schema and gives the schema a sample returns
// (the item layout above) and the schema of what the items' Replay stores per
// item. InvalidArgument naming the problem: a bad n, discount, L, P, stack
// depth, capacity or stream count, a reward, done or stacked column missing or
// of the wrong type, kNStep with no stacked column (the error names --stack),
// an item column whose name collides with a sample or stored column.
Status StepSchemas(const StepOptions& options, const Schema& step_schema, Schema* sample_schema,
                   Schema* stored_schema);

// One append, as the service decoded it: `steps` (possibly none) for the
// stream's next indices from first_step (kAtEnd, for an add: whatever they
// are), then items over the stream's steps,
// these included: one per step of this append (item_per_step, an add), or
// one per entry of item_steps (stream indices). Priorities empty (the max
// priority, as Replay::Add) or one per item; item_columns: each item
// column's rows, column after column.
struct AppendRequest {
  static constexpr int64_t kAtEnd = -1;  // first_step of an add: after whatever the stream holds
  int stream = 0;
  int64_t first_step = 0;
  store::StepBatch steps;
  bool item_per_step = false;
  std::span<const int64_t> item_steps{};
  std::span<const double> priorities{};
  std::span<const std::byte> item_columns{};
  int64_t item_count() const { return item_per_step ? steps.steps : static_cast<int64_t>(item_steps.size()); }
};

class StepReplay {
 public:
  // A table of `options`' layout over a ring of step_capacity steps of `step_schema`; its items in a Replay of
  // `items` (capacity: the items held at most; alpha, the tree's device, the priority policy). Besides
  // StepSchemas' checks, refuses an item span longer than the ring: n + K (kNStep) or L + K - 1 (kSequence) steps
  // over step_capacity, K the deepest stack; and Replay::Create's.
  static Status Create(const StepOptions& options, const ReplayOptions& items, Schema step_schema,
                       std::unique_ptr<StepReplay>* out);

  const StepOptions& options() const { return options_; }
  const Schema& step_schema() const { return steps_.schema(); }
  const Schema& sample_schema() const { return layout_.sample_schema; }
  int64_t SampleItemBytes() const { return layout_.sample_schema.ItemBytes(); }
  // One item's bytes of the item columns an actor sends with it (0: none).
  int64_t ItemColumnBytes() const { return layout_.item_column_bytes; }
  // Whether a sampled item's row is its step's row as stored (transitions):
  // a reply can then send the rows straight from the ring (StepSlots).
  bool RowsAreSteps() const { return options_.kind == StepOptions::Kind::kTransition; }
  // The most items the table can hold whole with the ring full of one long
  // episode per stream: a minimum size to sample above it may never be
  // reached (the server refuses one above the capacity, warns above this).
  int64_t ReachableItems() const;
  // The counts one append may carry: steps in [0, step capacity], items in
  // [0, the items' capacity], not both 0 (Prepare checks them first; the
  // service before it holds a request).
  Status CheckCounts(int64_t steps, int64_t items, bool item_per_step = false) const;
  int64_t stream_steps(int stream) const { return steps_.stream_steps(stream); }
  uint64_t next_step_key() const { return steps_.next_key(); }
  // The step ring, for tests, stats and checkpoints.
  const store::StepStore& steps() const { return steps_; }
  store::StepStore& mutable_steps() { return steps_; }
  // The items' Replay.
  const Replay& items() const { return *items_; }
  Replay& mutable_items() { return *items_; }

  // Checks `request` whole against the ring and the table as they are (its
  // steps in its bulk or already received into the ring's next slots), and
  // plans it: then planned_item_slots() are the item slots Commit writes.
  // Nothing changes. Errors name the problem: FailedPrecondition for a
  // first_step that is not stream_steps(stream), or items in an append of a
  // table whose items are not the steps themselves (item_per_step);
  // InvalidArgument for the rest: a stream outside [0, streams), bad counts
  // or byte counts, a bad done value, an item over a step the stream no
  // longer holds (or will not once this request's steps are in) or never
  // had, one whose steps are not all appended yet, a sequence not starting
  // at a multiple of the period from its episode's start, an item over a
  // step the table holds an item over already (or twice in the request),
  // and Replay::CheckAdd's (more items than the table holds, bad
  // priorities). O(steps + items * span).
  Status Prepare(const AppendRequest& request);
  const std::vector<int64_t>& planned_item_slots() const { return item_slots_; }
  // Applies the request Prepare just checked (nothing may change the replay
  // in between; the request's spans still valid): the steps go in, every item
  // that needs a step they push out of the ring leaves, then the new items
  // (keys *first_item_key .., or the next key when there are none). Fails
  // only where the items' tree device does. O(bytes + steps + items +
  // removed * log item capacity).
  Status Commit(uint64_t* first_item_key);
  // Prepare, then Commit.
  Status Append(const AppendRequest& request, uint64_t* first_item_key);
  // The same for steps in a bulk and items over listed steps.
  Status Append(int stream, int64_t first_step, int64_t steps, std::span<const std::byte> step_columns,
                std::span<const int64_t> item_steps, std::span<const double> priorities,
                std::span<const std::byte> item_columns, uint64_t* first_item_key) {
    AppendRequest request{stream, first_step, store::StepBatch{steps, step_columns, false}, false, item_steps,
                          priorities, item_columns};
    return Append(request, first_item_key);
  }

  // Writes the sampled items at these slots of the items' Replay (SampleResult::slots) in sample_schema's
  // layout, column after column (each column's rows for every slot in order), into out (slots.size() *
  // SampleItemBytes() bytes). Each slot must hold an item (one drawn since the last Commit): eviction is exact,
  // so such an item is whole and this never fails. Cost: one pass over the output, each byte written once; a
  // stacked column's frames are read once per stack they appear in and written interleaved onto the new last
  // axis (no intermediate copy); plus a scan of n or L steps' bookkeeping per item.
  void Assemble(std::span<const int64_t> item_slots, std::span<std::byte> out) const;
  // Assemble on this many threads (the caller's one of them; 1: on the
  // caller's alone, the default), each writing its own items' rows: the
  // bytes are the same whatever the count.
  void SetAssemblyThreads(int threads);
  int assembly_threads() const { return pool_ != nullptr ? pool_->threads() : 1; }
  // The step slots (of steps().columns()) of the items at these item slots: with RowsAreSteps, their rows.
  void StepSlots(std::span<const int64_t> item_slots, std::vector<int64_t>* step_slots) const;

  // Restoring from a checkpoint (service/checkpoint_restore.cc), into a StepReplay just created whose items'
  // Replay already holds the checkpoint's items: StartRestore (FailedPrecondition once anything was appended;
  // the arguments as store::StepStore::StartRestore's, streams grows to first_index.size()), RestoreSteps for
  // the held steps oldest key first (runs of one stream, checked bytes), RestoreItems (every item the items'
  // Replay holds is checked and linked), then EndRestore: every stream's next step begins a new episode (the
  // episode in progress ended with the process that appended it; an item spanning the restore is refused).
  Status StartRestore(uint64_t first_step_key, std::span<const int64_t> first_index,
                      std::span<const int64_t> episode_start);
  // Checked as an append's steps are (StepStore::CheckBatch: byte counts, done values); nothing changes on an error.
  Status RestoreSteps(int stream, int64_t steps, std::span<const std::byte> step_columns);
  // Every held item must be one Append would accept now over the held steps (CheckItem's checks), and no two
  // over one step: InvalidArgument naming its key and the problem otherwise.
  Status RestoreItems();
  // (Transitions have no episodes: nothing to begin.)
  void EndRestore() {
    if (steps_.episodic()) steps_.StartNewEpisodes();
  }

 private:
  StepReplay(const StepOptions& options, Schema step_schema, StepLayout layout, std::unique_ptr<Replay> items);

  // Checks the item at stream index t of a request (see Prepare) and gives the
  // key of step t and of its earliest needed step. RequestView reads held steps
  // and the request's alike.
  struct RequestView;
  Status CheckItem(const RequestView& request, size_t position, int64_t t, uint64_t* step_key,
                   uint64_t* earliest_key) const;
  // The held items an append of `steps` steps evicts (their earliest step
  // leaves the ring), into removed_ (keys) and removed_slots_.
  void CollectEvicted(int64_t steps);
  // The item at `item_slot` onto / off its earliest step's list.
  void Link(int64_t item_slot, uint64_t earliest_key);
  void Unlink(int64_t item_slot);
  // The item over step `step_key` the table holds, or kNoItem.
  int64_t ItemOver(uint64_t step_key) const;
  // The key of step t of the item at `item_slot` (its stored row's first
  // column), and the start of that row's read (a batch's misses overlapped).
  uint64_t ItemStepKey(int64_t item_slot) const {
    uint64_t key = 0;
    std::memcpy(&key, items_->store().Rows(0, item_slot, 1).data(), sizeof(key));
    return key;
  }
  void PrefetchItemRow(int64_t item_slot) const { __builtin_prefetch(items_->store().Rows(0, item_slot, 1).data()); }

  // Assemble's parts (step_assembly.cc).
  struct ItemView;
  ItemView ViewItem(int64_t item_slot) const;
  void WriteColumn(const SampleColumn& column, const ItemView& item, int64_t item_slot, std::byte* out) const;
  // The value of step column `column` at stream index `index`, stacked to
  // `depth` frames (zeros before `episode_start`), into out.
  void WriteStacked(int column, int depth, int stream, int64_t index, int64_t episode_start, std::byte* out) const;

  StepOptions options_;
  StepLayout layout_;
  store::StepStore steps_;
  std::unique_ptr<Replay> items_;
  // Eviction lists: per step slot the first item slot whose earliest step it
  // is; per item slot the next and previous on its list (kNoItem: none) and
  // its earliest step's key.
  std::vector<int64_t> item_head_;
  std::vector<int64_t> item_next_, item_prev_;
  std::vector<uint64_t> item_earliest_;
  // Per step slot: the item slot of the item over that step (kNoItem: none).
  std::vector<int64_t> item_over_;
  std::vector<std::byte> zero_frame_;  // a stacked column's frame before an episode's start
  std::unique_ptr<AssemblyPool> pool_;  // Assemble's threads (none: the caller's alone)
  // The prepared append (Prepare -> Commit).
  AppendRequest prepared_;
  bool is_prepared_ = false;
  std::vector<uint8_t> request_done_;
  std::vector<int64_t> request_episode_start_;
  std::vector<uint64_t> earliest_keys_;   // the new items' earliest steps
  std::vector<uint64_t> item_step_keys_;  // the new items' step t keys
  std::vector<uint64_t> removed_;         // the items evicted with their steps
  std::vector<int64_t> removed_slots_;
  std::vector<int64_t> item_slots_, pushed_out_;
  std::vector<std::byte> rows_;  // the new items' stored rows
};

}  // namespace perserve::replay
