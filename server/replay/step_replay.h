// StepReplay: a replay rank's tables over its one step store. Actors
// append steps to their own stream; each step is stored once
// (store::StepStore's ring); items are views over steps, kept with their
// priorities in a table's Replay; a sample assembles its table's item layout
// from the ring. A transition is the one-step case: an add is an append
// whose steps each make the item over themselves, and a sample returns the
// step's own columns (sent straight from the ring where the transport can).
//
// Several tables (ItemTable, item_table.h), each named, share the ring: one
// append may create items in any of them over the same steps (an n-step
// table for one learner and a sequence table for another), and a step
// leaving the ring takes every item of every table that needs it. Each
// table has its own layout, keys (its own sequence numbers), selector,
// remover and capacity; table 0 is the default one.
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
//   (84, 84, 4). With StepOptions::frames_first the new axis is the first
//   instead: (4, 84, 84), each frame's bytes as appended (in a sequence,
//   [L] + [k] + c.shape).
//
// Items (one layout per table). In each layout below, "c" runs over the step
// columns in step-schema order; the item columns come last, as sent.
// - kTransition: the item at step t is step t: c (every column) as appended.
// - kNStep (n >= 1, discount G in [0, 1]): the item at step t. e is the
//   episode's last step if it ends at some e <= t+n; then n' = e-t+1 when e
//   is terminal (e <= t+n-1), n' = e-t when e is a bootstrap step; else
//   n' = n. Creatable once step t+n is appended, or once the episode ended at
//   e <= t+n. Layout:
//     c (every column but reward and done): c.shape, or c.shape + [k] stacked
//              ([k] + c.shape frames first);
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
// Memory: the step columns in page memory (untouched until written), plus 32
// bytes a step slot (StepStore's) and 16 a table (a list head, the item over
// it) and 8 a held step; per item slot the Replay's tree, key and store row
// (the 8-byte step key and the item columns, touched only for slots items
// have used) and 24 bytes of links.
//
// Does no I/O. Not thread-safe: the service calls it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "replay/assembly_pool.h"
#include "replay/item_table.h"
#include "replay/replay.h"
#include "replay/step_layout.h"
#include "store/step_store.h"

namespace perserve::replay {


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

// One table of a StepReplay: its name, item layout and items' Replay
// options (capacity, alpha, selector, remover, max_times_sampled, ...).
struct TableConfig {
  std::string name = "default";
  StepOptions layout;
  ReplayOptions items;
};

// One append, as the service decoded it: `steps` (possibly none) for the
// stream's next indices from first_step (kAtEnd, for an add: whatever they
// are), then items over the stream's steps, these included, in any of the
// tables (each at most once; see TableItems).
struct AppendRequest {
  static constexpr int64_t kAtEnd = -1;  // first_step of an add: after whatever the stream holds
  int stream = 0;
  int64_t first_step = 0;
  store::StepBatch steps;
  std::span<const TableItems> items{};
  // Whether every table's items are one per step (an add), and there are some.
  bool IsAdd() const;
};

class StepReplay {
 public:
  // Tables over a ring of step_capacity steps of `step_schema`; each table's items in a Replay of its `items`
  // options (capacity: the items held at most; alpha, the tree's device, the priority policy, the selector). The
  // ring's fields of StepOptions (step_capacity, streams, prefault, reward_column, done_column) are the first
  // table's; every table's must agree with them. Refuses no tables, an empty or repeated name, each table's
  // StepSchemas errors, an item span longer than the ring (n + K for kNStep, L + K - 1 for kSequence, K the
  // deepest stack) and Replay::Create's, each naming the table.
  static Status Create(std::vector<TableConfig> tables, Schema step_schema, std::unique_ptr<StepReplay>* out);
  // One table, "default".
  static Status Create(const StepOptions& options, const ReplayOptions& items, Schema step_schema,
                       std::unique_ptr<StepReplay>* out);

  // The ring's options (the first table's layout fields with them).
  const StepOptions& options() const { return options_; }
  const Schema& step_schema() const { return steps_.schema(); }
  int tables() const { return static_cast<int>(tables_.size()); }
  const ItemTable& table(int index) const { return *tables_[static_cast<size_t>(index)]; }
  ItemTable& mutable_table(int index) { return *tables_[static_cast<size_t>(index)]; }
  // The index of the table named `name`, or -1.
  int TableIndex(std::string_view name) const;
  // The tables' names, in order, comma separated (for messages).
  std::string TableNames() const;
  // OK for an index in [0, tables()); else InvalidArgument naming the tables.
  Status CheckTable(int64_t table) const;

  // The default table's (table 0's), as a replay of one table reads them.
  const Schema& sample_schema() const { return table(0).sample_schema(); }
  int64_t SampleItemBytes() const { return table(0).SampleItemBytes(); }
  int64_t ItemColumnBytes() const { return table(0).ItemColumnBytes(); }
  bool RowsAreSteps() const { return table(0).RowsAreSteps(); }
  int64_t ReachableItems() const { return table(0).ReachableItems(); }
  const Replay& items() const { return table(0).items(); }
  Replay& mutable_items() { return mutable_table(0).mutable_items(); }
  const std::vector<int64_t>& planned_item_slots() const { return table(0).planned_item_slots(); }
  void Assemble(std::span<const int64_t> item_slots, std::span<std::byte> out) const {
    table(0).Assemble(item_slots, out);
  }
  void StepSlots(std::span<const int64_t> item_slots, std::vector<int64_t>* step_slots) const {
    table(0).StepSlots(item_slots, step_slots);
  }

  // The counts one append may carry: steps in [0, step capacity], each
  // table's items in [0, its capacity] (an add's: its steps, at least 1),
  // not all 0 (Prepare checks them first; the service before it holds a
  // request). A table index outside [0, tables()) is InvalidArgument.
  Status CheckCounts(int64_t steps, int table, int64_t items, bool item_per_step) const;
  Status CheckSteps(int64_t steps, int64_t items) const;
  int64_t stream_steps(int stream) const { return steps_.stream_steps(stream); }
  uint64_t next_step_key() const { return steps_.next_key(); }
  // The step ring, for tests, stats and checkpoints.
  const store::StepStore& steps() const { return steps_; }
  store::StepStore& mutable_steps() { return steps_; }

  // Checks `request` whole against the ring and the tables as they are (its
  // steps in its bulk or already received into the ring's next slots), and
  // plans it: then each table's planned_item_slots() are the item slots
  // Commit writes. Nothing changes. Errors name the problem (and the table):
  // FailedPrecondition for a first_step that is not stream_steps(stream), or
  // an add's items for a table whose items are not the steps themselves
  // (item_per_step); InvalidArgument for the rest: a stream outside [0,
  // streams), a table index outside [0, tables()) or given twice, bad counts
  // or byte counts, a bad done value, an item over a step the stream no
  // longer holds (or will not once this request's steps are in) or never
  // had, one whose steps are not all appended yet, a sequence not starting
  // at a multiple of the period from its episode's start, an item over a
  // step its table holds an item over already (or twice in the request),
  // and Replay::CheckAdd's (more items than the table holds, bad
  // priorities). O(steps + items * span + tables).
  Status Prepare(const AppendRequest& request);
  // Applies the request Prepare just checked (nothing may change the replay
  // in between; the request's spans still valid): the steps go in, every item
  // of every table that needs a step they push out of the ring leaves, then
  // the new items. *first_item_key: the first new item's key of the
  // request's first table (first_item_keys() has each table's, in the
  // request's order; a table given no items: its next key). Fails only where
  // a table's tree device does. O(bytes + steps * tables + items + removed *
  // log item capacity).
  Status Commit(uint64_t* first_item_key);
  const std::vector<uint64_t>& first_item_keys() const { return first_item_keys_; }
  // Prepare, then Commit.
  Status Append(const AppendRequest& request, uint64_t* first_item_key);
  // The same for steps in a bulk and items of the default table over listed steps.
  Status Append(int stream, int64_t first_step, int64_t steps, std::span<const std::byte> step_columns,
                std::span<const int64_t> item_steps, std::span<const double> priorities,
                std::span<const std::byte> item_columns, uint64_t* first_item_key) {
    const TableItems items{0, false, item_steps, priorities, item_columns};
    AppendRequest request{stream, first_step, store::StepBatch{steps, step_columns, false}, {&items, 1}};
    return Append(request, first_item_key);
  }

  // Assemble on this many threads (the caller's one of them; 1: on the
  // caller's alone, the default), each writing its own items' rows: the
  // bytes are the same whatever the count. Every table's.
  void SetAssemblyThreads(int threads);
  int assembly_threads() const { return pool_ != nullptr ? pool_->threads() : 1; }

  // Restoring from a checkpoint (service/checkpoint/checkpoint_restore.cc), into a StepReplay just created whose
  // tables' Replays already hold the checkpoint's items: StartRestore (FailedPrecondition once anything was
  // appended; the arguments as store::StepStore::StartRestore's, streams grows to first_index.size()),
  // RestoreSteps for the held steps oldest key first (runs of one stream, checked bytes), RestoreItems (every item
  // each table's Replay holds is checked and linked), then EndRestore: every stream's next step begins a new
  // episode (the episode in progress ended with the process that appended it; an item spanning the restore is
  // refused).
  Status StartRestore(uint64_t first_step_key, std::span<const int64_t> first_index,
                      std::span<const int64_t> episode_start);
  // Checked as an append's steps are (StepStore::CheckBatch: byte counts, done values); nothing changes on an error.
  Status RestoreSteps(int stream, int64_t steps, std::span<const std::byte> step_columns);
  // Every held item must be one Append would accept now over the held steps (CheckItem's checks), and no two of
  // a table over one step: InvalidArgument naming the table, its key and the problem otherwise (*failed_table,
  // if given: that table's index).
  Status RestoreItems(int* failed_table = nullptr);
  // (Transitions have no episodes: nothing to begin.)
  void EndRestore() {
    if (steps_.episodic()) steps_.StartNewEpisodes();
  }

 private:
  StepReplay(const StepOptions& options, Schema step_schema, int reward_column, int done_column);

  StepOptions options_;
  store::StepStore steps_;
  std::vector<std::unique_ptr<ItemTable>> tables_;
  std::unique_ptr<AssemblyPool> pool_;  // Assemble's threads (none: the caller's alone)
  // The prepared append (Prepare -> Commit).
  AppendRequest prepared_;
  bool is_prepared_ = false;
  std::vector<uint8_t> request_done_;
  std::vector<int64_t> request_episode_start_;
  std::vector<int> unasked_;  // the tables the prepared request gives no items (their evictions only)
  std::vector<uint64_t> first_item_keys_;
};

}  // namespace perserve::replay
