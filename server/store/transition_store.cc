#include "store/transition_store.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace perserve::store {

TransitionStore::TransitionStore(Schema schema, int64_t capacity, bool prefault)
    : schema_(std::move(schema)), capacity_(capacity) {
  for (const Column& column : schema_.columns) {
    const int64_t item_bytes = column.ItemBytes();
    const size_t bytes = static_cast<size_t>(item_bytes * capacity_);
    columns_.push_back({item_bytes, util::AllocatePageMemory(bytes)});
    if (prefault) std::memset(columns_.back().data.get(), 0, bytes);
  }
}

Status TransitionStore::CheckBatch(int64_t count, std::span<const std::byte> bulk) const {
  if (count <= 0) return Status::InvalidArgument(fmt::format("a batch of {} items", count));
  if (count > capacity_) {
    return Status::InvalidArgument(fmt::format("a batch of {} items is larger than the store ({} slots)", count,
                                               capacity_));
  }
  const uint64_t expected = static_cast<uint64_t>(count) * static_cast<uint64_t>(schema_.ItemBytes());
  if (bulk.size() != expected) {
    return Status::InvalidArgument(fmt::format("a batch of {} items must carry {} bytes of columns ({} per item: {}), "
                                               "got {}",
                                               count, expected, schema_.ItemBytes(), schema_.ToString(), bulk.size()));
  }
  return Status::Ok();
}

void TransitionStore::Regions(int64_t first_slot, int64_t count, std::vector<std::span<std::byte>>* regions) {
  regions->clear();
  for (ColumnArray& column : columns_) {
    // At most two runs: up to the end of the ring, then from slot 0.
    const int64_t first_run = std::min(count, capacity_ - first_slot);
    const auto bytes = [&column](int64_t items) { return static_cast<size_t>(items * column.item_bytes); };
    regions->emplace_back(column.data.get() + first_slot * column.item_bytes, bytes(first_run));
    if (first_run < count) regions->emplace_back(column.data.get(), bytes(count - first_run));
  }
}

void TransitionStore::CopyInto(std::span<const std::byte> bulk, std::span<const std::span<std::byte>> regions) {
  const std::byte* source = bulk.data();
  for (const std::span<std::byte> region : regions) {
    std::memcpy(region.data(), source, region.size());
    source += region.size();
  }
}

void TransitionStore::Write(int64_t first_slot, int64_t count, std::span<const std::byte> bulk) {
  std::vector<std::span<std::byte>> regions;
  Regions(first_slot, count, &regions);
  CopyInto(bulk, regions);
}

void TransitionStore::Gather(std::span<const int64_t> slots, std::span<std::byte> out) const {
  std::byte* target = out.data();
  for (const ColumnArray& column : columns_) {
    for (int64_t slot : slots) {
      std::memcpy(target, column.data.get() + slot * column.item_bytes, column.item_bytes);
      target += column.item_bytes;
    }
  }
}

void TransitionStore::Scatter(std::span<const int64_t> slots, std::span<const std::byte> bulk) {
  const std::byte* source = bulk.data();
  for (ColumnArray& column : columns_) {
    for (int64_t slot : slots) {
      std::memcpy(column.data.get() + slot * column.item_bytes, source, column.item_bytes);
      source += column.item_bytes;
    }
  }
}

}  // namespace perserve::store
