#include "store/step_store.h"

#include <cassert>
#include <cstring>

#include <fmt/format.h>

namespace perserve::store {

StepStore::StepStore(Schema schema, int64_t capacity, int64_t slack, int streams, int reward_column,
                     int done_column, bool prefault)
    : columns_(std::move(schema), capacity + slack, prefault),
      capacity_(capacity),
      reward_column_(reward_column),
      done_column_(done_column),
      info_(static_cast<size_t>(capacity + slack)),
      streams_(static_cast<size_t>(streams)) {
  int64_t offset = 0;
  for (const Column& column : columns_.schema().columns) {
    column_offsets_.push_back(offset);
    offset += column.ItemBytes();
  }
}

void StepStore::OverwrittenKeys(int64_t steps, uint64_t* first, uint64_t* end) const {
  // Writing keys next .. next + steps - 1 reuses the slots of keys `slots` below them.
  const uint64_t slots = static_cast<uint64_t>(this->slots());
  const uint64_t next = next_key_ + static_cast<uint64_t>(steps);
  *first = std::max(first_key_, next_key_ > slots ? next_key_ - slots : 0);
  *end = std::max(*first, next > slots ? next - slots : 0);
}

const std::byte* StepStore::BatchRow(const StepBatch& batch, int column, int64_t j) const {
  if (batch.in_ring) return Row(column, next_key_ + static_cast<uint64_t>(j));
  const int64_t item_bytes = columns_.schema().columns[static_cast<size_t>(column)].ItemBytes();
  return batch.bulk.data() + column_offsets_[static_cast<size_t>(column)] * batch.steps + j * item_bytes;
}

uint8_t StepStore::Done(const StepBatch& batch, int64_t j) const {
  if (done_column_ < 0) return 0;
  return static_cast<uint8_t>(*BatchRow(batch, done_column_, j));
}

double StepStore::Reward(const StepBatch& batch, int64_t j) const {
  if (reward_column_ < 0) return 0.0;
  const std::byte* row = BatchRow(batch, reward_column_, j);
  if (columns_.schema().columns[static_cast<size_t>(reward_column_)].dtype == DType::kFloat32) {
    float reward;
    std::memcpy(&reward, row, sizeof(float));
    return static_cast<double>(reward);
  }
  double reward;
  std::memcpy(&reward, row, sizeof(double));
  return reward;
}

Status StepStore::CheckBatch(const StepBatch& batch) const {
  if (batch.steps < 1 || batch.steps > capacity_) {
    return Status::InvalidArgument(
        fmt::format("an append of {} steps: the count must be in [1, step capacity {}]", batch.steps, capacity_));
  }
  if (!batch.in_ring) PERSERVE_RETURN_IF_ERROR(columns_.CheckBatch(batch.steps, batch.bulk));
  if (batch.in_ring && batch.steps > slack()) {
    return Status::Internal(fmt::format("{} steps received into the ring's {} free slots", batch.steps, slack()));
  }
  for (int64_t j = 0; j < batch.steps && done_column_ >= 0; ++j) {
    const uint8_t done = Done(batch, j);
    if (done > kTruncated) {
      return Status::InvalidArgument(fmt::format(
          "step {} of the batch has done {}: 0 (the episode goes on), {} (it ended with this step's action) or {} "
          "(it was cut off, and this step holds the observation it was cut off at)",
          j, done, kTerminal, kTruncated));
    }
  }
  return Status::Ok();
}

void StepStore::WriteRegions(int64_t steps, std::vector<std::span<std::byte>>* regions) {
  assert(steps <= slack());
  columns_.Regions(SlotOf(next_key_), steps, regions);
}

void StepStore::Commit(int stream, const StepBatch& batch) {
  const int64_t steps = batch.steps;
  // The steps pushed out of the ring leave their streams: each is its
  // stream's oldest (keys grow with the index within a stream).
  for (uint64_t key = oldest_key(); key < OldestKeyAfter(steps); ++key) {
    Stream& owner = streams_[static_cast<size_t>(Info(key).stream)];
    assert(!owner.keys.empty() && owner.keys.front() == key);
    owner.keys.pop_front();
  }
  if (!batch.in_ring) columns_.Write(SlotOf(next_key_), steps, batch.bulk);
  Stream& s = streams_[static_cast<size_t>(stream)];
  for (int64_t j = 0; j < steps; ++j) {
    const uint64_t key = next_key_ + static_cast<uint64_t>(j);
    StepInfo& info = info_[static_cast<size_t>(SlotOf(key))];
    info.index = s.steps;
    info.episode_start = s.next_episode_start;
    info.stream = stream;
    // Read back from the ring: the bulk's rows are there now.
    info.reward = Reward(StepBatch{steps, {}, true}, j);
    info.done = Done(StepBatch{steps, {}, true}, j);
    s.keys.push_back(key);
    ++s.steps;
    if (info.done != 0) s.next_episode_start = s.steps;
  }
  next_key_ += static_cast<uint64_t>(steps);
}

void StepStore::StartRestore(uint64_t first_key, std::span<const int64_t> first_index,
                             std::span<const int64_t> episode_start) {
  assert(next_key_ == 0 && first_index.size() == episode_start.size());
  GrowStreams(static_cast<int>(first_index.size()));
  for (size_t s = 0; s < first_index.size(); ++s) {
    streams_[s].steps = first_index[s];
    streams_[s].next_episode_start = episode_start[s];
  }
  first_key_ = first_key;
  next_key_ = first_key;
}

}  // namespace perserve::store
