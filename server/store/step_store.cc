#include "store/step_store.h"

#include <cassert>
#include <cstring>

#include <fmt/format.h>

namespace perserve::store {

StepStore::StepStore(Schema schema, int64_t capacity, int streams, int reward_column, int done_column,
                     bool prefault)
    : columns_(std::move(schema), capacity, prefault),
      reward_column_(reward_column),
      done_column_(done_column),
      info_(static_cast<size_t>(capacity)),
      streams_(static_cast<size_t>(streams)) {
  int64_t offset = 0;
  for (const Column& column : columns_.schema().columns) {
    column_offsets_.push_back(offset);
    offset += column.ItemBytes();
  }
}

uint8_t StepStore::BulkDone(std::span<const std::byte> bulk, int64_t steps, int64_t j) const {
  return static_cast<uint8_t>(bulk[static_cast<size_t>(column_offsets_[done_column_] * steps + j)]);
}

double StepStore::BulkReward(std::span<const std::byte> bulk, int64_t steps, int64_t j) const {
  const std::byte* column = bulk.data() + column_offsets_[reward_column_] * steps;
  if (columns_.schema().columns[reward_column_].dtype == DType::kFloat32) {
    float reward;
    std::memcpy(&reward, column + j * sizeof(float), sizeof(float));
    return static_cast<double>(reward);
  }
  double reward;
  std::memcpy(&reward, column + j * sizeof(double), sizeof(double));
  return reward;
}

Status StepStore::CheckBatch(int64_t steps, std::span<const std::byte> bulk) const {
  PERSERVE_RETURN_IF_ERROR(columns_.CheckBatch(steps, bulk));
  for (int64_t j = 0; j < steps; ++j) {
    const uint8_t done = BulkDone(bulk, steps, j);
    if (done > kTruncated) {
      return Status::InvalidArgument(fmt::format(
          "step {} of the batch has done {}: 0 (the episode goes on), {} (it ended with this step's action) or {} "
          "(it was cut off, and this step holds the observation it was cut off at)",
          j, done, kTerminal, kTruncated));
    }
  }
  return Status::Ok();
}

void StepStore::Append(int stream, int64_t steps, std::span<const std::byte> bulk) {
  // The steps about to be overwritten leave their streams: each is its
  // stream's oldest (keys grow with the index within a stream).
  for (uint64_t key = oldest_key(); key < OldestKeyAfter(steps); ++key) {
    Stream& owner = streams_[static_cast<size_t>(Info(key).stream)];
    assert(!owner.keys.empty() && owner.keys.front() == key);
    owner.keys.pop_front();
  }
  columns_.Write(SlotOf(next_key_), steps, bulk);
  Stream& s = streams_[static_cast<size_t>(stream)];
  for (int64_t j = 0; j < steps; ++j) {
    const uint64_t key = next_key_ + static_cast<uint64_t>(j);
    StepInfo& info = info_[static_cast<size_t>(SlotOf(key))];
    info.index = s.steps;
    info.episode_start = s.next_episode_start;
    info.reward = BulkReward(bulk, steps, j);
    info.stream = stream;
    info.done = BulkDone(bulk, steps, j);
    s.keys.push_back(key);
    ++s.steps;
    if (info.done != 0) s.next_episode_start = s.steps;
  }
  next_key_ += static_cast<uint64_t>(steps);
}

void StepStore::StartRestore(uint64_t first_key, std::span<const int64_t> first_index,
                             std::span<const int64_t> episode_start) {
  assert(next_key_ == 0 && first_index.size() == episode_start.size());
  if (first_index.size() > streams_.size()) streams_.resize(first_index.size());
  for (size_t s = 0; s < first_index.size(); ++s) {
    streams_[s].steps = first_index[s];
    streams_[s].next_episode_start = episode_start[s];
  }
  first_key_ = first_key;
  next_key_ = first_key;
}

}  // namespace perserve::store
