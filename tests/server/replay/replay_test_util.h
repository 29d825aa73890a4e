// Helpers the replay tests share: a replay of item numbers, its items' bytes,
// and a leaf's value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "replay/replay.h"

namespace perserve::replay::replay_test {

// One int64 column holding each item's own number, so tests can tell items apart.
inline Schema IdSchema() { return Schema{{{"id", DType::kInt64, {}}}}; }

// Replay::Create, failing the test (and returning null) when it fails.
inline std::unique_ptr<Replay> MakeReplay(const ReplayOptions& options, const Schema& schema = IdSchema()) {
  std::unique_ptr<Replay> replay;
  const Status status = Replay::Create(options, schema, &replay);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return replay;
}

// The bytes of `count` IdSchema items numbered first, first + 1, ...
inline std::vector<std::byte> Ids(int64_t first, int64_t count) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) ids[j] = first + j;
  const auto bytes = std::as_bytes(std::span(ids));
  return {bytes.begin(), bytes.end()};
}

inline double Leaf(const Replay& replay, int64_t slot) {
  double value = 0.0;
  EXPECT_TRUE(replay.tree().Get(std::span<const int64_t>(&slot, 1), std::span<double>(&value, 1)).ok());
  return value;
}

}  // namespace perserve::replay::replay_test
