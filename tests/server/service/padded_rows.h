// Helpers the transition service tests share: rows of an id and pad bytes
// derived from it (a torn or misplaced row shows), their columns in the wire
// layout, and adds of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "perserve/schema.h"
#include "proto/append.h"
#include "server/service/service_test_util.h"

namespace perserve::service::padded_rows {

// The actor and learner clients; the ring's capacity (steps, as many items);
// each row's pad bytes.
inline constexpr int kActor = 0, kLearner = 1;
inline constexpr int64_t kCapacity = 64;
inline constexpr int64_t kPad = 24;

inline Schema RowSchema() { return Schema{{{"id", DType::kInt64, {}}, {"pad", DType::kUInt8, {kPad}}}}; }

inline uint8_t PadByte(int64_t id, int64_t j) { return static_cast<uint8_t>(id * 7 + j); }

// The columns of items first_id, first_id + 1, ...: each row's id, and pad bytes derived from it.
inline std::vector<std::byte> Columns(int64_t first_id, int64_t count) {
  std::vector<std::byte> columns(static_cast<size_t>(count * (8 + kPad)));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = first_id + i;
    std::memcpy(columns.data() + 8 * i, &id, 8);
    for (int64_t j = 0; j < kPad; ++j) {
      columns[static_cast<size_t>(8 * count + i * kPad + j)] = std::byte{PadByte(id, j)};
    }
  }
  return columns;
}

// An add of items first_id, first_id + 1, ... (transitions at the end of the sender's stream).
inline std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_id, int64_t count,
                                       double timeout_seconds = 0.0) {
  return service_test::AddFrame(request_id, proto::AppendMeta::kAtEnd, count, Columns(first_id, count), {},
                                timeout_seconds);
}

}  // namespace perserve::service::padded_rows
