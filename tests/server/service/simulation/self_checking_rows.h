// Rows that check themselves. Every item the simulation adds holds its id
// (the adding actor and that actor's item number) and pad bytes derived from
// the id, so a sampled row says which add it came from and whether it is
// whole, whatever key the server gave it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "perserve/schema.h"

namespace perserve::service::simulation {

// {"id": int64, "pad": uint8[pad_bytes]}: the wire layout is every item's id,
// then every item's pad (column after column).
inline Schema SelfCheckingSchema(int64_t pad_bytes) {
  return Schema{{{"id", DType::kInt64, {}}, {"pad", DType::kUInt8, {pad_bytes}}}};
}

inline int64_t ItemId(int actor, int64_t item_number) { return (int64_t{actor} << 32) | item_number; }
inline int ActorOfItem(int64_t id) { return static_cast<int>(id >> 32); }

inline uint8_t PadByte(int64_t id, int64_t j) {
  uint64_t x = static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(j) * 0xbf58476d1ce4e5b9ULL;
  return static_cast<uint8_t>((x ^ (x >> 29)) >> 24);
}

// The columns of `actor`'s items first_item .. first_item + count - 1.
inline std::vector<std::byte> EncodeColumns(int actor, int64_t first_item, int64_t count, int64_t pad_bytes) {
  std::vector<std::byte> columns(static_cast<size_t>(count * (8 + pad_bytes)));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = ItemId(actor, first_item + i);
    std::memcpy(columns.data() + 8 * i, &id, 8);
    for (int64_t j = 0; j < pad_bytes; ++j) {
      columns[static_cast<size_t>(8 * count + i * pad_bytes + j)] = static_cast<std::byte>(PadByte(id, j));
    }
  }
  return columns;
}

// Row i of `count` rows laid out as EncodeColumns does: its id, and false if
// its pad is not the one of that id (a torn row, or another item's bytes).
inline bool ReadRow(std::span<const std::byte> columns, int64_t count, int64_t i, int64_t pad_bytes, int64_t* id) {
  std::memcpy(id, columns.data() + 8 * i, 8);
  for (int64_t j = 0; j < pad_bytes; ++j) {
    if (static_cast<uint8_t>(columns[static_cast<size_t>(8 * count + i * pad_bytes + j)]) != PadByte(*id, j)) {
      return false;
    }
  }
  return true;
}

// The same for rows held column by column (a SampleBatch's columns, an
// actor's lent buffers): row i of the ids column and of the pad column.
inline bool ReadRow(std::span<const std::byte> ids, std::span<const std::byte> pads, int64_t i, int64_t pad_bytes,
                    int64_t* id) {
  std::memcpy(id, ids.data() + 8 * i, 8);
  for (int64_t j = 0; j < pad_bytes; ++j) {
    if (static_cast<uint8_t>(pads[static_cast<size_t>(i * pad_bytes + j)]) != PadByte(*id, j)) return false;
  }
  return true;
}

// Writes item `id` as row i of the ids and pad columns.
inline void WriteRow(std::span<std::byte> ids, std::span<std::byte> pads, int64_t i, int64_t pad_bytes, int64_t id) {
  std::memcpy(ids.data() + 8 * i, &id, 8);
  for (int64_t j = 0; j < pad_bytes; ++j) pads[static_cast<size_t>(i * pad_bytes + j)] = std::byte(PadByte(id, j));
}

}  // namespace perserve::service::simulation
