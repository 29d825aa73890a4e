// The append request (MessageKind::kAppendRequest): an actor's steps and the
// items it creates over them, the one way data enters a replay rank. Items
// come in groups, one per table the append creates items in (each table at
// most once; no group: steps only). A transition add is a group whose steps
// each make the item over themselves (item_per_step). The client encodes
// with EncodeAppend, the server decodes with DecodeAppend: the layout lives
// here alone.
//
// Bulk, in this order:
//   step columns   each step column's `steps` rows, column after column, in
//                  the step schema's order (none with columns_follow: they
//                  are the sender's next message, on kAddColumnsTag)
// then for each group, in the meta's order:
//   item steps     `items` int64 stream indices (none with item_per_step)
//   priorities     one double per item (has_priorities)
//   item columns   its table's item columns: each column's rows, one per
//                  item, column after column
// where a group's items are `steps` with item_per_step, else `items`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cereal/types/vector.hpp>

#include "perserve/status.h"
#include "proto/codec.h"

namespace perserve::proto {

// The items an append creates in one table.
struct ItemGroup {
  int32_t table = 0;           // its index in the join's ServedSchemas::tables
  int64_t items = 0;           // items over listed steps; with item_per_step, 0 (the steps are the items)
  bool item_per_step = false;  // an add to a table of transitions
  bool has_priorities = false;
  int64_t item_count(int64_t steps) const { return item_per_step ? steps : items; }
  template <class Archive>
  void serialize(Archive& ar) {
    ar(table, items, item_per_step, has_priorities);
  }
};

struct AppendMeta {
  // The stream index of the first step (the stream's steps so far: a lost or
  // repeated request is refused), or, for an add (every group item_per_step),
  // kAtEnd: after whatever the stream holds (adds stand alone: one refused
  // does not refuse those sent after it).
  static constexpr int64_t kAtEnd = -1;
  int64_t first_step = 0;
  int64_t steps = 0;
  std::vector<ItemGroup> groups;
  bool columns_follow = false;
  // > 0: the server answers DEADLINE_EXCEEDED (and stores nothing), saying
  // what held it, if the append still waits this many seconds after it arrived.
  double timeout_seconds = 0.0;
  // The items of every group.
  int64_t item_count() const;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(first_step, steps, groups, columns_follow, timeout_seconds);
  }
};

// One group as the server decodes it: item_columns views the frame, the
// small arrays are copied out (the bulk is not aligned for them).
struct DecodedItems {
  int table = 0;
  bool item_per_step = false;
  std::vector<int64_t> item_steps;  // empty with item_per_step
  std::vector<double> priorities;   // empty without has_priorities
  std::span<const std::byte> item_columns;
};

// An append as the server decodes it: the byte regions view the frame
// (whoever keeps the decoded append keeps the frame's bytes).
struct DecodedAppend {
  AppendMeta meta;
  std::span<const std::byte> step_columns;  // empty with columns_follow
  std::vector<DecodedItems> groups;         // the meta's, in its order
  int64_t item_count() const { return meta.item_count(); }
};

// Checks the meta (counts >= 0, steps and items not all 0; item_per_step
// groups with items 0; each group's table in [0, item_bytes_by_table.size())
// and no table twice; kAtEnd only when every group, and at least one, is
// item_per_step; no negative timeout) and that the bulk holds exactly what
// it says, for steps of `step_bytes` and each table t's items of
// item_bytes_by_table[t] bytes of item columns, and slices it.
// InvalidArgument naming what does not add up. O(groups^2 + items).
Status DecodeAppend(const Frame& frame, int64_t step_bytes, std::span<const int64_t> item_bytes_by_table,
                    DecodedAppend* append);

// What EncodeAppend copies in for one group (the meta's group of the same
// index): its item steps (none with item_per_step), priorities
// (has_priorities) and item columns (one span per item column).
struct ItemGroupSpans {
  std::span<const int64_t> item_steps;
  std::span<const double> priorities;
  std::span<const std::span<const std::byte>> item_columns;
};

// The whole request frame (EncodeFrameWithTail's layout) into `out`: the
// step columns (one span per step column; none with columns_follow), then
// each group's spans (groups[i] for meta.groups[i]) copied in, in that
// order. The caller has checked the spans' sizes against the schemas.
void EncodeAppend(uint64_t request_id, const AppendMeta& meta,
                  std::span<const std::span<const std::byte>> step_columns, std::span<const ItemGroupSpans> groups,
                  std::vector<std::byte>* out);

}  // namespace perserve::proto
