// The append request (MessageKind::kAppendRequest): an actor's steps and the
// items it creates over them, the one way data enters a replay rank. A
// transition add is an append whose steps each make the item over
// themselves (item_per_step). The client encodes with EncodeAppend, the
// server decodes with DecodeAppend: the layout lives here alone.
//
// Bulk, in this order:
//   step columns   each step column's `steps` rows, column after column, in
//                  the step schema's order (none with columns_follow: they
//                  are the sender's next message, on kAddColumnsTag)
//   item steps     `items` int64 stream indices (none with item_per_step)
//   priorities     one double per item (has_priorities)
//   item columns   each item column's rows, one per item, column after column
// where the items are `steps` with item_per_step, else `items`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "perserve/status.h"
#include "proto/codec.h"

namespace perserve::proto {

struct AppendMeta {
  // The stream index of the first step (the stream's steps so far: a lost or
  // repeated request is refused), or, for an add (item_per_step), kAtEnd:
  // after whatever the stream holds (adds stand alone: one refused does not
  // refuse those sent after it).
  static constexpr int64_t kAtEnd = -1;
  int64_t first_step = 0;
  int64_t steps = 0;
  int64_t items = 0;  // items over listed steps; with item_per_step, 0 (the steps are the items)
  bool item_per_step = false;
  bool has_priorities = false;
  bool columns_follow = false;
  // > 0: the server answers DEADLINE_EXCEEDED (and stores nothing), saying
  // what held it, if the append still waits this many seconds after it arrived.
  double timeout_seconds = 0.0;
  int64_t item_count() const { return item_per_step ? steps : items; }
  template <class Archive>
  void serialize(Archive& ar) {
    ar(first_step, steps, items, item_per_step, has_priorities, columns_follow, timeout_seconds);
  }
};

// An append as the server decodes it: the byte regions view the frame
// (whoever keeps the decoded append keeps the frame's bytes), the small
// arrays are copied out (the bulk is not aligned for them).
struct DecodedAppend {
  AppendMeta meta;
  std::span<const std::byte> step_columns;  // empty with columns_follow
  std::vector<int64_t> item_steps;
  std::vector<double> priorities;
  std::span<const std::byte> item_columns;
};

// Checks the meta's counts (>= 0, not both 0; items 0 with item_per_step;
// no negative timeout) and that the bulk holds exactly what they say, for
// steps of `step_bytes` and items of `item_bytes` of item columns, and
// slices it. InvalidArgument naming what does not add up.
Status DecodeAppend(const Frame& frame, int64_t step_bytes, int64_t item_bytes, DecodedAppend* append);

// The whole request frame (EncodeFrameWithTail's layout) into `out`: the
// step columns (one span per step column; none with columns_follow), the
// item steps (none with item_per_step), the priorities (has_priorities) and
// the item columns (one span per item column) copied in, in that order. The
// caller has checked the spans' sizes against the schemas.
void EncodeAppend(uint64_t request_id, const AppendMeta& meta,
                  std::span<const std::span<const std::byte>> step_columns, std::span<const int64_t> item_steps,
                  std::span<const double> priorities, std::span<const std::span<const std::byte>> item_columns,
                  std::vector<std::byte>* out);

}  // namespace perserve::proto
