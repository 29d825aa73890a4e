// Helpers the step checkpoint tests share: a seeded driver of random appends
// (steps, items, priority updates, samples) over a StepReplay of n-step items
// or sequences, a checkpoint
// written slice by slice, a restore into a fresh StepReplay, and the check
// that two step replays serve the same: keys, probabilities, weights and
// assembled bytes, bit for bit.
#pragma once

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"
#include "server/service/checkpoint/checkpoint_test_util.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::step_checkpoint_test {

using replay::StepOptions;
using replay::step_test::StepFixture;

// obs uint8 [rows, 32] (large rows: a checkpoint's slice holds few steps), reward, done, action.
inline Schema StepSchema(int64_t obs_rows = 2) {
  return Schema{{{"obs", DType::kUInt8, {obs_rows, 32}},
                 {"reward", DType::kFloat32, {}},
                 {"done", DType::kUInt8, {}},
                 {"action", DType::kInt32, {}}}};
}

inline StepOptions NStepOptions(int64_t step_capacity) {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 3;
  options.discount = 0.9;
  options.stacks = {{"obs", 3}};
  options.step_capacity = step_capacity;
  options.streams = 3;
  return options;
}

inline StepOptions SequenceOptions(int64_t step_capacity) {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 4;
  options.sequence_period = 2;
  options.stacks = {{"obs", 2}};
  options.item_columns = {Column{"state", DType::kFloat32, {2}}};
  options.step_capacity = step_capacity;
  options.streams = 3;
  return options;
}

// Random requests, the same for every fixture driven from the same seed.
class Driver {
 public:
  explicit Driver(uint64_t seed) : rng_(seed) {}

  // `count` steps' wire bytes; each done with probability 1/6, or the last one when `end`.
  std::vector<std::byte> Steps(const Schema& schema, int64_t count, bool end) {
    std::vector<std::byte> bulk;
    for (const Column& column : schema.columns) {
      for (int64_t j = 0; j < count; ++j) {
        std::vector<std::byte> row(static_cast<size_t>(column.ItemBytes()));
        if (column.name == "done") {
          row[0] = std::byte{static_cast<uint8_t>((end && j == count - 1) || rng_() % 6 == 0 ? 1 : 0)};
        } else if (column.name == "reward") {
          const float reward = static_cast<float>(rng_() % 1000) / 100.0f;
          std::memcpy(row.data(), &reward, sizeof(reward));
        } else {
          for (size_t i = 0; i < row.size(); i += 8) {
            const uint64_t bits = rng_();
            std::memcpy(row.data() + i, &bits, std::min<size_t>(8, row.size() - i));
          }
        }
        bulk.insert(bulk.end(), row.begin(), row.end());
      }
    }
    return bulk;
  }

  // One stream appends 1..3 steps; then items at some of its last steps,
  // each in a request of its own (refused ones are skipped: an item over a
  // step that has one, one not whole yet); now and then a sample and a
  // priority update. Each append goes through `writer`'s BeforeWrite when
  // given (a checkpoint being written keeps what it overwrites).
  void Round(StepFixture* f, CheckpointWriter* writer = nullptr) {
    replay::StepReplay& steps = *f->steps;
    const int stream = static_cast<int>(rng_() % static_cast<uint64_t>(steps.options().streams));
    const int64_t count = 1 + static_cast<int64_t>(rng_() % 3);
    const std::vector<std::byte> bulk = Steps(steps.step_schema(), count, false);
    uint64_t first = 0;
    replay::AppendRequest request{stream, steps.stream_steps(stream), store::StepBatch{count, bulk, false}};
    const Status appended = checkpoint_test::AppendDuringCheckpoint(&steps, request, writer, &first);
    ASSERT_TRUE(appended.ok()) << appended.ToString();
    const int64_t held = steps.stream_steps(stream);
    for (int64_t t = std::max(steps.steps().stream_oldest(stream), held - 6); t < held; ++t) {
      if (rng_() % 2 == 0) continue;
      const double priority = 0.1 + static_cast<double>(rng_() % 300) / 100.0;
      std::vector<std::byte> columns(static_cast<size_t>(steps.ItemColumnBytes()));
      for (std::byte& b : columns) b = std::byte{static_cast<uint8_t>(rng_() % 64)};
      const replay::TableItems items{0, false, std::span<const int64_t>(&t, 1), std::span<const double>(&priority, 1),
                                     columns};
      const replay::AppendRequest item{stream, held, {}, {&items, 1}};
      (void)checkpoint_test::AppendDuringCheckpoint(&steps, item, writer, &first);
    }
    if (rng_() % 3 == 0 && f->items->size() > 0) {
      replay::SampleResult sample;
      ASSERT_TRUE(f->items->Sample(4, 0.4, &sample).ok());
      std::vector<double> priorities;
      for (size_t i = 0; i < sample.keys.size(); ++i) priorities.push_back(0.05 + static_cast<double>(rng_() % 500) / 100.0);
      replay::UpdateCounts counts;
      ASSERT_TRUE(f->items->UpdatePriorities(sample.keys, priorities, &counts).ok());
    }
  }

  // Every stream's episode ends (a step with done 1): a restored stream and
  // the uninterrupted one then both begin a new episode.
  void EndEpisodes(StepFixture* f) {
    for (int s = 0; s < f->steps->options().streams; ++s) {
      uint64_t first = 0;
      const std::vector<std::byte> bulk = Steps(f->steps->step_schema(), 1, true);
      ASSERT_TRUE(f->steps->Append(s, f->steps->stream_steps(s), 1, bulk, {}, {}, {}, &first).ok());
    }
  }

 private:
  std::mt19937_64 rng_;
};

inline StepFixture MakeFixture(const StepOptions& options, const Schema& schema, int64_t item_capacity) {
  StepFixture fixture;
  const Status made = replay::step_test::MakeStepReplay(options, schema, item_capacity, &fixture, 0.6);
  EXPECT_TRUE(made.ok()) << made.ToString();
  return fixture;
}

// Begin, then one tiny Step after another until complete; `between` runs
// after Begin and between them.
inline Status WriteCheckpoint(CheckpointWriter* writer, StepFixture* f, const std::function<void()>& between = {}) {
  PERSERVE_RETURN_IF_ERROR(writer->Begin(*f->steps, checkpoint_test::StateOf()));
  if (between) between();
  bool done = false;
  while (!done) {
    PERSERVE_RETURN_IF_ERROR(writer->Step(*f->steps, std::chrono::microseconds(1), &done));
    if (between && !done) between();
  }
  return Status::Ok();
}

inline Status Restore(const std::string& path, StepFixture* into) {
  return checkpoint_test::Restore(path, into->steps.get());
}

// The same held items (keys, slots, leaves, rows), ring and tree nodes, and
// `rounds` samples with the same keys, probabilities, weights and assembled
// bytes (each draws from both). `a` is restored from a checkpoint of `b` (or
// of b's twin).
inline void ExpectSameServing(StepFixture* a, StepFixture* b, int rounds = 8) {
  checkpoint_test::ExpectSameTable(*a->steps, *b->steps);
  if (a->items->size() == 0) return;
  checkpoint_test::ExpectSameSamples(a->steps.get(), b->steps.get(), rounds, 16);
}

}  // namespace perserve::service::step_checkpoint_test
