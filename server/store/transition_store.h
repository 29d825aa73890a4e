// TransitionStore: the transitions' bytes, one contiguous array per schema
// column, `capacity` slots each (a ring: the replay decides which slot an item
// goes to). Knows nothing of priorities or keys.
//
// Column arrays are allocated untouched on huge pages (util/page_memory.h), so
// a large capacity only costs memory for the slots actually written, and
// intake of large transitions takes a page fault per 2 MiB, not per 4 KiB.
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "util/page_memory.h"

namespace perserve::store {

class TransitionStore {
 public:
  // With `prefault`, every page is written once now, so intake never pays a
  // page fault (and a 2 MiB zero-fill) while the ring fills for the first
  // time; the memory is committed at start, and an oversized store fails then.
  TransitionStore(Schema schema, int64_t capacity, bool prefault = false);

  const Schema& schema() const { return schema_; }
  int64_t capacity() const { return capacity_; }

  // Checks that `bulk` holds exactly `count` items of every column, laid out
  // column after column (the wire layout of an intake batch).
  Status CheckBatch(int64_t count, std::span<const std::byte> bulk) const;

  // Writes a checked batch into slots first_slot, first_slot + 1, ... (mod
  // capacity). count <= capacity. O(bytes).
  void Write(int64_t first_slot, int64_t count, std::span<const std::byte> bulk);

  // Where a batch written at first_slot goes, in the wire layout's order:
  // each column's run of slots, split in two where the ring wraps (so 1 or 2
  // regions a column). `count` <= capacity. The caller writes them (an MPI
  // receive straight into the store).
  void Regions(int64_t first_slot, int64_t count, std::vector<std::span<std::byte>>* regions);
  // Copies `bulk` into `regions`, one after another (their sizes add up to
  // at most bulk's): a batch in the wire layout into the regions Regions gave.
  static void CopyInto(std::span<const std::byte> bulk, std::span<const std::span<std::byte>> regions);

  // Copies the items in `slots` out, column after column, into `out`, which
  // must hold slots.size() * schema().ItemBytes() bytes.
  void Gather(std::span<const int64_t> slots, std::span<std::byte> out) const;
  // The reverse: a checked batch (CheckBatch(slots.size(), bulk)) into `slots`.
  void Scatter(std::span<const int64_t> slots, std::span<const std::byte> bulk);

  // Column `column`'s bytes of slots first_slot .. first_slot + count - 1, in
  // place (no wrap: first_slot + count <= capacity). For checkpoints.
  std::span<const std::byte> Rows(int column, int64_t first_slot, int64_t count) const {
    const ColumnArray& array = columns_[static_cast<size_t>(column)];
    return {array.data.get() + first_slot * array.item_bytes, static_cast<size_t>(count * array.item_bytes)};
  }

 private:
  struct ColumnArray {
    int64_t item_bytes;
    util::PageMemory data;
  };

  Schema schema_;
  int64_t capacity_;
  std::vector<ColumnArray> columns_;
};

}  // namespace perserve::store
