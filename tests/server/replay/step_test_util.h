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

// A StepReplay and its items' Replay.
struct StepFixture {
  std::unique_ptr<StepReplay> steps;
  Replay* items = nullptr;  // steps' own
};

inline Status MakeStepReplay(const StepOptions& options, const Schema& step_schema, int64_t item_capacity,
                             StepFixture* fixture, double alpha = 1.0) {
  PERSERVE_RETURN_IF_ERROR(StepReplay::Create(options, ReplayOptions{item_capacity, alpha, tree::Device::kCpu, 11},
                                              step_schema, &fixture->steps));
  fixture->items = &fixture->steps->mutable_items();
  return Status::Ok();
}

// A table of transitions (each step its own item) of `schema`: a ring of
// `capacity` steps, as many items, `streams` streams.
inline Status MakeTransitionReplay(const Schema& schema, int64_t capacity, int streams, StepFixture* fixture,
                                   double alpha = 1.0, uint64_t seed = 11) {
  StepOptions options;
  options.kind = StepOptions::Kind::kTransition;
  options.step_capacity = capacity;
  options.streams = streams;
  PERSERVE_RETURN_IF_ERROR(StepReplay::Create(options, ReplayOptions{capacity, alpha, tree::Device::kCpu, seed},
                                              schema, &fixture->steps));
  fixture->items = &fixture->steps->mutable_items();
  return Status::Ok();
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
