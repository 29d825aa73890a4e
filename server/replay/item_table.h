// ItemTable: one of a StepReplay's tables, its items over the replay's step
// ring (step_replay.h states the item layouts, eviction and memory). A
// table's name, layout, items' Replay (keys, priorities, selector, remover,
// capacity), and the lists that make eviction exact: per step slot the items
// whose earliest needed step it is, and the item over that step.
//
// StepReplay creates its tables and drives their appends (PrepareItems,
// then the commit steps) and restores; the service reads a table to sample
// it (items(), Assemble, StepSlots). Does no I/O. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "replay/assembly_pool.h"
#include "replay/replay.h"
#include "replay/step_layout.h"
#include "store/step_store.h"

namespace perserve::replay {

// One table's items in an append (AppendRequest::items): one per step of
// the append (item_per_step, an add to a table of transitions), or one per
// entry of item_steps (stream indices). Priorities empty (the table's max
// priority, as Replay::Add) or one per item; item_columns: each item
// column's rows, column after column.
struct TableItems {
  int table = 0;
  bool item_per_step = false;
  std::span<const int64_t> item_steps{};
  std::span<const double> priorities{};
  std::span<const std::byte> item_columns{};
  int64_t count(int64_t steps) const { return item_per_step ? steps : static_cast<int64_t>(item_steps.size()); }
};

// A stream's steps as they will be once an append is in: those the ring
// holds now and the append's (read from its columns), indices oldest ..
// new_steps - 1. A restore's view has no append (old_steps == new_steps).
struct StreamView {
  const store::StepStore& store;
  int stream;
  int64_t oldest;             // the stream's oldest index held now
  int64_t old_steps;          // its steps before the append
  int64_t new_steps;          // and after
  uint64_t first_new_key;     // the append's first step's key
  uint64_t oldest_key_after;  // the ring's oldest key once the append is in
  const std::vector<uint8_t>& done;           // the append's steps'
  const std::vector<int64_t>& episode_start;  // the append's steps'

  uint64_t Key(int64_t i) const {
    return i >= old_steps ? first_new_key + static_cast<uint64_t>(i - old_steps) : store.KeyOf(stream, i);
  }
  // 0, store::kTerminal or store::kTruncated.
  uint8_t Done(int64_t i) const {
    return i >= old_steps ? done[static_cast<size_t>(i - old_steps)] : store.Info(Key(i)).done;
  }
  int64_t EpisodeStart(int64_t i) const {
    return i >= old_steps ? episode_start[static_cast<size_t>(i - old_steps)] : store.Info(Key(i)).episode_start;
  }
};

// A sampled batch's reply bytes (sample_schema's layout, column after column)
// as parts, in order, for a transport that sends them from where they lie
// (ItemTable::PlanReply): rows of the ring's step columns, read when the reply
// goes, and bytes the table computed into `scratch` (returns, discounts,
// masks, item columns, zeros, stacks interleaved on a last axis).
struct ReplyPlan {
  struct Part {
    // A row of the ring's step columns (or the table's zero frame, which
    // never changes), else nullptr: `bytes` of scratch from `offset` on.
    const std::byte* row = nullptr;
    int64_t step_slot = -1;  // the ring slot `row` is in; -1: not the ring's
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  std::vector<Part> parts;
  std::vector<std::byte> scratch;
};

class ItemTable {
 public:
  static constexpr int64_t kNoItem = -1;

  const std::string& name() const { return name_; }
  // Its item layout (the ring's fields are the StepReplay's).
  const StepOptions& options() const { return options_; }
  const StepLayout& layout() const { return layout_; }
  const Schema& sample_schema() const { return layout_.sample_schema; }
  int64_t SampleItemBytes() const { return layout_.sample_schema.ItemBytes(); }
  // One item's bytes of the item columns an actor sends with it (0: none).
  int64_t ItemColumnBytes() const { return layout_.item_column_bytes; }
  // Whether a sampled item's row is its step's row as stored (transitions):
  // Assemble then copies the rows whole (StepSlots).
  bool RowsAreSteps() const;
  // The most items the table can hold whole with the ring full of one long
  // episode per stream: a minimum size to sample above it may never be
  // reached (the server refuses one above the capacity, warns above this).
  int64_t ReachableItems() const;
  // The items' Replay: keys, priorities, the selector. Draws go through
  // Sample, which keeps the eviction lists in step with the items a draw
  // removes (max_times_sampled).
  const Replay& items() const { return *items_; }
  Replay& mutable_items() { return *items_; }
  // Replay::Sample; the items it removes leave their eviction lists.
  Status Sample(int64_t batch_size, double beta, SampleResult* result);
  // The item slots the prepared append writes (StepReplay::Prepare).
  const std::vector<int64_t>& planned_item_slots() const { return item_slots_; }

  // Writes the sampled items at these slots of the items' Replay (SampleResult::slots) in sample_schema's
  // layout, column after column (each column's rows for every slot in order), into out (slots.size() *
  // SampleItemBytes() bytes). Each slot must hold an item (one drawn since the last commit): eviction is exact,
  // so such an item is whole and this never fails. Cost: one pass over the output, each byte written once; a
  // stacked column's frames are read once per stack they appear in and written interleaved onto the new last
  // axis, or one after another frames first (no intermediate copy); plus a scan of n or L steps' bookkeeping per item. On the StepReplay's
  // assembly threads: the bytes are the same whatever their count.
  void Assemble(std::span<const int64_t> item_slots, std::span<std::byte> out) const;
  // The step slots (of the ring's columns) of the items at these item slots: with RowsAreSteps, their rows.
  void StepSlots(std::span<const int64_t> item_slots, std::vector<int64_t>* step_slots) const;
  // Whether a reply's stacked columns are rows of the ring as they stand:
  // nothing stacked on a last axis (transitions, unstacked columns, stacks
  // frames first). PlanReply then leaves the table only small computed parts.
  bool RepliesFromRing() const;
  // The bytes Assemble writes for these items, as parts (ReplyPlan): what a
  // reply sent from the ring reads. The same conditions and the same bytes
  // as Assemble; one pass over the items' bookkeeping, no frame copied (a
  // stack on a last axis is interleaved into the scratch).
  void PlanReply(std::span<const int64_t> item_slots, ReplyPlan* plan) const;

 private:
  friend class StepReplay;
  ItemTable(std::string name, const StepOptions& options, StepLayout layout, std::unique_ptr<Replay> items,
            const store::StepStore* steps);

  // The counts an append may carry for this table (see StepReplay::CheckCounts).
  Status CheckCount(int64_t steps, int64_t items, bool item_per_step) const;
  // Checks `request`'s items against the stream as `view` shows it and the
  // table as it is, and plans them (the items the append's steps evict,
  // the slots the new ones take). Nothing changes.
  Status PrepareItems(const StreamView& view, const TableItems& request, int64_t steps);
  // The same for an append that gives this table no items: the evictions alone.
  void PrepareEvictions(int64_t steps);
  // The items an append of `steps` steps evicts (their earliest step leaves
  // the ring), into removed_ (keys) and removed_slots_.
  void CollectEvicted(int64_t steps);
  // Commit's parts, around the ring's own: the items leaving go off their
  // lists; the new steps' slots start with none; the new items go in.
  void UnlinkLeaving();
  void ClearStepSlots(uint64_t first_key, int64_t steps);
  Status CommitItems(const TableItems& request, int stream, uint64_t* first_item_key);
  // Restoring: links every held item (RestoreItems' checks).
  Status LinkRestored();

  // Checks the item at stream index t and gives the key of step t and of its earliest needed step.
  Status CheckItem(const StreamView& view, size_t position, int64_t t, uint64_t* step_key,
                   uint64_t* earliest_key) const;
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
  // Both go through EmitColumn, the one statement of where an item's bytes
  // come from, into a sink (step_assembly.cc: one that writes them, one
  // that plans them).
  struct ItemView;
  ItemView ViewItem(int64_t item_slot) const;
  // ViewItem of each of these slots into out[i], their misses overlapped.
  void ViewItems(std::span<const int64_t> item_slots, ItemView* out) const;
  template <typename Sink>
  void EmitColumn(const SampleColumn& column, const ItemView& item, int64_t item_slot, Sink& sink) const;
  // The value of step column `column` at stream index `index`, stacked to
  // `depth` frames (zeros before `episode_start`).
  template <typename Sink>
  void EmitStacked(int column, int depth, int stream, int64_t index, int64_t episode_start, Sink& sink) const;

  std::string name_;
  // What its errors begin with: "table NAME: " when the replay has several
  // tables, else nothing (a replay of one table says what it always said).
  std::string label_;
  StepOptions options_;
  StepLayout layout_;
  const store::StepStore* steps_;
  std::unique_ptr<Replay> items_;
  AssemblyPool* pool_ = nullptr;  // the StepReplay's assembly threads (none: the caller's alone)
  // Eviction lists: per step slot the first item slot whose earliest step it
  // is; per item slot the next and previous on its list (kNoItem: none) and
  // its earliest step's key.
  std::vector<int64_t> item_head_;
  std::vector<int64_t> item_next_, item_prev_;
  std::vector<uint64_t> item_earliest_;
  // Per step slot: the item slot of the item over that step (kNoItem: none).
  std::vector<int64_t> item_over_;
  std::vector<std::byte> zero_frame_;  // a stacked column's frame before an episode's start
  // The prepared append's part in this table.
  std::vector<uint64_t> earliest_keys_;   // the new items' earliest steps
  std::vector<uint64_t> item_step_keys_;  // the new items' step t keys
  std::vector<uint64_t> removed_;         // the items evicted with their steps
  std::vector<int64_t> removed_slots_;
  std::vector<int64_t> item_slots_, pushed_out_;
  std::vector<std::byte> rows_;  // the new items' stored rows
};

}  // namespace perserve::replay
