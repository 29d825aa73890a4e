// StepReplay: items over step streams (issue 27). Actors append steps to
// their own stream; each step is stored once (store::StepStore's ring);
// items are views over steps, kept with their priorities in a Replay; a
// sample assembles the item layout below from the ring.
//
// Steps and episodes
// - Stream s (0 .. streams-1) appends steps with indices 0, 1, ... Every step
//   has every step column, among them a scalar float32/float64 reward and a
//   scalar uint8 done: 0 (the episode goes on), 1 (terminal: the episode
//   ended with this step's action) or 2 (truncated: the episode was cut off,
//   by a time limit say, and this step is its bootstrap step, holding the
//   observation it was cut off at; its other columns are returned but its
//   reward is never summed, and no item starts at it). Either nonzero value
//   marks the episode's last step; the stream's next step begins a new
//   episode. Episodes never cross: n-step
//   returns stop at the end, stacks put zero frames before the episode's
//   first step (Dopamine's convention), sequences zero and mask steps past
//   the end.
// - A stacked column (StepOptions::stacks, depth k > 1) comes back with a new
//   last axis of k frames, oldest first: the frames of steps t-k+1 .. t, those
//   before t's episode's first step all zeros. An 84x84 frame stacks to
//   (84, 84, 4).
//
// Items (one kind per replay). In each layout below, "c" runs over the step
// columns in step-schema order; the item columns come last, as sent.
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
//
// Eviction is exact. An item's steps all belong to one stream, where keys
// grow with the index, and the ring overwrites in key order; so the item's
// earliest needed step, max(episode start, t-K+1) for the deepest stack K, is
// overwritten first. Each step slot heads a list of the items whose earliest
// step it is (newest first, linked through an array per item slot); when an
// append overwrites the step, every item on it still held by the items'
// Replay is removed there (Replay::Remove: leaf 0, never drawn, later
// updates to it stale), before the append returns. So every item the tree can
// draw has all its steps in the ring.
//
// Memory: the step columns in page memory (untouched until written), plus 40
// bytes a step slot (StepStore's 32, a list head) and 8 a held step; per item
// slot the Replay's tree, its 8-byte step column and an 8-byte list link.
//
// Does no I/O. Not thread-safe: the service calls it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "replay/replay.h"
#include "replay/step_layout.h"
#include "store/step_store.h"

namespace perserve::replay {

struct StepOptions {
  enum class Kind { kNStep, kSequence };
  Kind kind = Kind::kNStep;
  int n_step = 1;                 // kNStep: n >= 1
  double discount = 0.99;         // kNStep: finite, in [0, 1]
  int sequence_length = 0;        // kSequence: L >= 1
  int sequence_period = 0;        // kSequence: P in [1, L]
  std::vector<std::pair<std::string, int>> stacks;  // step column -> depth >= 1 (depth 1: not stacked)
  std::string reward_column = "reward";  // scalar float32 or float64 step column
  std::string done_column = "done";      // scalar uint8 step column: 0, 1 (terminal) or 2 (truncated: bootstrap step)
  std::vector<Column> item_columns;      // columns an actor sends with each item (e.g. a recurrent state)
  int64_t step_capacity = int64_t{1} << 21;  // steps the ring holds (all streams together)
  int streams = 1;                        // stream ids are 0 .. streams-1 (the service's client ids)
  bool prefault = false;                  // write every page of the step ring at start (--prefault-store)
};

// Checks options against the step schema and gives the schema a sample returns
// (the item layout above) and the schema of what the items' Replay stores per
// item. InvalidArgument naming the problem: a bad n, discount, L, P, stack
// depth, capacity or stream count, a reward, done or stacked column missing or
// of the wrong type, kNStep with no stacked column (the error names --stack),
// an item column whose name collides with a sample or stored column.
Status StepSchemas(const StepOptions& options, const Schema& step_schema, Schema* sample_schema,
                   Schema* stored_schema);

class StepReplay {
 public:
  // `items` is a Replay created with the stored_schema StepSchemas gave (its capacity = the item capacity, its
  // tree = the priorities); StepReplay does not own it, and is the only thing that adds items to it (it must be
  // empty now). Besides StepSchemas' checks, refuses an item span longer than the ring: n + K (kNStep) or
  // L + K - 1 (kSequence) steps over step_capacity, K the deepest stack.
  static Status Create(const StepOptions& options, Schema step_schema, Replay* items,
                       std::unique_ptr<StepReplay>* out);

  const StepOptions& options() const { return options_; }
  const Schema& step_schema() const { return steps_.schema(); }
  const Schema& sample_schema() const { return layout_.sample_schema; }
  int64_t SampleItemBytes() const { return layout_.sample_schema.ItemBytes(); }
  // One item's bytes of the item columns an actor sends with it (0: none).
  int64_t ItemColumnBytes() const { return layout_.item_column_bytes; }
  // The counts one append may carry: steps in [0, step capacity], items in
  // [0, the items' capacity] (Append checks them first; the service before
  // it holds a request).
  Status CheckCounts(int64_t steps, int64_t items) const;
  int64_t stream_steps(int stream) const { return steps_.stream_steps(stream); }
  uint64_t next_step_key() const { return steps_.next_key(); }
  // Added: the step ring, for tests and stats (the oldest steps held, each
  // stream's held run of indices, a step's bookkeeping).
  const store::StepStore& steps() const { return steps_; }

  // One request from stream `stream`: appends `steps` steps (step_columns: each step column's `steps` rows,
  // column after column, in step_schema order: the wire layout) whose stream indices are first_step ..
  // first_step + steps - 1 (first_step must equal stream_steps(stream): a lost or repeated request is caught),
  // then creates one item per entry of item_steps (a stream index, which may be one of this request's steps),
  // with priorities (empty: the max priority, as Replay::Add) and item_columns (each item column's rows, column
  // after column). Either count may be 0.
  //
  // Everything is checked first; on any error nothing changes and the error names the problem:
  // FailedPrecondition for a first_step that is not stream_steps(stream); InvalidArgument for the rest: a
  // stream outside [0, streams), steps < 0 or over step_capacity, wrong byte counts, an item over a step the
  // stream no longer holds (or will not once this request's steps are in) or never had, one whose steps are
  // not all appended yet, a sequence not starting at a multiple of the period from its episode's start, and
  // Replay::CheckAdd's (more items than the item replay holds, bad priorities).
  //
  // Appended steps overwrite the oldest steps of the ring; every item that needs an overwritten step is
  // removed from the items' tree in the same call, before the new items are added. *first_item_key: the
  // first new item's key (the items' next key when there are none). O(bytes + steps + items * span + removed
  // * log item capacity), span n or L (the scan for an episode's end).
  Status Append(int stream, int64_t first_step, int64_t steps, std::span<const std::byte> step_columns,
                std::span<const int64_t> item_steps, std::span<const double> priorities,
                std::span<const std::byte> item_columns, uint64_t* first_item_key);

  // Writes the sampled items at these slots of the items' Replay (SampleResult::slots) in sample_schema's
  // layout, column after column (each column's rows for every slot in order), into out (slots.size() *
  // SampleItemBytes() bytes). Each slot must hold an item with a nonzero leaf (one drawn since the last
  // Append): eviction is exact, so such an item is whole and this never fails. Cost: one pass over the output,
  // each byte written once; a stacked column's frames are read once per stack they appear in and written
  // interleaved onto the new last axis (no intermediate copy); plus a scan of n or L steps' bookkeeping per
  // item.
  void Assemble(std::span<const int64_t> item_slots, std::span<std::byte> out) const;

  // Restoring from a checkpoint (service/step_checkpoint.h), into a StepReplay just created whose items' Replay
  // already holds the checkpoint's items: StartRestore (FailedPrecondition once anything was appended; the
  // arguments as store::StepStore::StartRestore's, streams grows to first_index.size()), RestoreSteps for the held
  // steps oldest key first (runs of one stream, checked bytes), RestoreItem for every item the items' Replay
  // holds, oldest key first, then EndRestore: every stream's next step begins a new episode (the episode in
  // progress ended with the process that appended it; an item spanning the restore is refused). The eviction
  // lists come out as Append built them.
  Status StartRestore(uint64_t first_step_key, std::span<const int64_t> first_index,
                      std::span<const int64_t> episode_start);
  // Checked as an append's steps are (StepStore::CheckBatch: byte counts, done values); nothing changes on an error.
  Status RestoreSteps(int stream, int64_t steps, std::span<const std::byte> step_columns) {
    PERSERVE_RETURN_IF_ERROR(steps_.CheckBatch(steps, step_columns));
    steps_.Append(stream, steps, step_columns);
    return Status::Ok();
  }
  // An item whose leaf is 0 (removed: evicted with its steps) is kept as it is and may name steps long gone. Any
  // other must be an item Append would accept now over the held steps (CheckItem's checks): InvalidArgument
  // naming its key and the problem otherwise.
  Status RestoreItem(uint64_t item_key, double leaf);
  void EndRestore() { steps_.StartNewEpisodes(); }

 private:
  StepReplay(const StepOptions& options, Schema step_schema, StepLayout layout, Replay* items);

  // Checks the item at stream index t of a request (see Append) and gives the
  // key of its earliest needed step. RequestView reads held steps and the
  // request's alike.
  struct RequestView;
  Status CheckItem(const RequestView& request, size_t position, int64_t t, uint64_t* earliest_key) const;

  // Collects into removed_ the held items on the lists of the steps that
  // appending this many steps overwrites.
  void CollectOverwrittenItems(int64_t steps);

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
  Replay* items_;
  std::vector<uint64_t> item_head_;  // per step slot: the newest item whose earliest step it is, or kNoItem
  std::vector<uint64_t> item_next_;  // per item slot: the next (older) item on its list
  std::vector<std::byte> zero_frame_;  // a stacked column's frame before an episode's start
  // Scratch reused across requests.
  std::vector<uint8_t> request_done_;
  std::vector<int64_t> request_episode_start_;
  std::vector<uint64_t> earliest_keys_;
  std::vector<uint64_t> item_step_keys_;  // the new items' step t keys: their stored step column
  std::vector<uint64_t> removed_;
};

}  // namespace perserve::replay
