// Helpers the step replay tests share: a step schema with a stacked frame, a
// float64 column, an action, reward and done; a StepReplay over a fresh
// items' Replay; requests' bytes in the wire layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "replay/step_replay.h"

namespace perserve::replay::step_test {

// obs uint8 [2,3], reward, pos float64 [2], done uint8, action int32.
inline Schema TestStepSchema(DType reward = DType::kFloat32) {
  return Schema{{{"obs", DType::kUInt8, {2, 3}},
                 {"reward", reward, {}},
                 {"pos", DType::kFloat64, {2}},
                 {"done", DType::kUInt8, {}},
                 {"action", DType::kInt32, {}}}};
}

// A StepReplay and the items' Replay it adds to.
struct StepFixture {
  std::unique_ptr<Replay> items;
  std::unique_ptr<StepReplay> steps;
};

inline Status MakeStepReplay(const StepOptions& options, const Schema& step_schema, int64_t item_capacity,
                             StepFixture* fixture, double alpha = 1.0) {
  Schema sample, stored;
  PERSERVE_RETURN_IF_ERROR(StepSchemas(options, step_schema, &sample, &stored));
  PERSERVE_RETURN_IF_ERROR(
      Replay::Create(ReplayOptions{item_capacity, alpha, tree::Device::kCpu, 11}, stored, &fixture->items));
  return StepReplay::Create(options, step_schema, fixture->items.get(), &fixture->steps);
}

// Rows (rows[j][c]: step j's bytes of column c) in the wire layout: each
// column's rows, column after column.
inline std::vector<std::byte> WireLayout(const std::vector<std::vector<std::vector<std::byte>>>& rows,
                                         size_t columns) {
  std::vector<std::byte> bulk;
  for (size_t c = 0; c < columns; ++c) {
    for (const auto& row : rows) bulk.insert(bulk.end(), row[c].begin(), row[c].end());
  }
  return bulk;
}

inline double Leaf(const Replay& replay, int64_t slot) {
  double value = 0.0;
  EXPECT_TRUE(replay.tree().Get(std::span<const int64_t>(&slot, 1), std::span<double>(&value, 1)).ok());
  return value;
}

}  // namespace perserve::replay::step_test
