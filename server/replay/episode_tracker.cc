#include "replay/episode_tracker.h"

#include <algorithm>
#include <cstring>

#include "scan/episodic_prefix_sum.h"

namespace perserve::replay {
namespace {

template <typename T>
double Load(const std::byte* data, int64_t j) {
  T value;
  std::memcpy(&value, data + sizeof(T) * j, sizeof(T));
  return static_cast<double>(value);
}

// Reads element j of a scalar column of any dtype as a double.
double ReadAsDouble(const std::byte* data, DType dtype, int64_t j) {
  switch (dtype) {
    case DType::kUInt8: return Load<uint8_t>(data, j);
    case DType::kInt32: return Load<int32_t>(data, j);
    case DType::kInt64: return Load<int64_t>(data, j);
    case DType::kFloat32: return Load<float>(data, j);
    case DType::kFloat64: return Load<double>(data, j);
  }
  return 0.0;
}

int ScalarColumn(const Schema& schema, std::string_view name) {
  const int index = schema.ColumnIndex(name);
  return index >= 0 && schema.columns[index].ElementCount() == 1 ? index : -1;
}

}  // namespace

EpisodeTracker::EpisodeTracker(const Schema& schema, std::string_view reward, std::string_view done, int streams,
                               bool bootstrap_steps)
    : schema_(schema),
      reward_column_(ScalarColumn(schema, reward)),
      done_column_(ScalarColumn(schema, done)),
      bootstrap_steps_(bootstrap_steps),
      carries_(static_cast<size_t>(streams)) {}

void EpisodeTracker::Observe(int stream, int64_t count, std::span<const std::byte> columns) {
  if (!enabled() || count <= 0) return;
  const std::byte* reward_data = nullptr;
  const std::byte* done_data = nullptr;
  size_t offset = 0;
  for (int c = 0; c < static_cast<int>(schema_.columns.size()); ++c) {
    if (c == reward_column_) reward_data = columns.data() + offset;
    if (c == done_column_) done_data = columns.data() + offset;
    offset += static_cast<size_t>(count * schema_.columns[c].ItemBytes());
  }
  Scan(stream, count, reward_data, done_data);
}

void EpisodeTracker::ObserveRegions(int stream, std::span<const std::span<std::byte>> regions) {
  const auto columns = static_cast<int64_t>(schema_.columns.size());
  if (!enabled() || regions.empty() || static_cast<int64_t>(regions.size()) % columns != 0) return;
  const int64_t parts = static_cast<int64_t>(regions.size()) / columns;
  for (int64_t part = 0; part < parts; ++part) {
    const std::span<std::byte> rewards = regions[static_cast<size_t>(reward_column_ * parts + part)];
    const std::span<std::byte> dones = regions[static_cast<size_t>(done_column_ * parts + part)];
    Scan(stream, static_cast<int64_t>(rewards.size()) / schema_.columns[reward_column_].ItemBytes(), rewards.data(),
         dones.data());
  }
}

void EpisodeTracker::Scan(int stream, int64_t count, const std::byte* reward_data, const std::byte* done_data) {
  if (count <= 0) return;
  const size_t n = static_cast<size_t>(count);
  rewards_.resize(n);
  dones_.resize(n);
  ones_.assign(n, 1.0);
  returns_.resize(n);
  lengths_.resize(n);
  for (size_t j = 0; j < n; ++j) {
    rewards_[j] = ReadAsDouble(reward_data, schema_.columns[reward_column_].dtype, static_cast<int64_t>(j));
    const double done = ReadAsDouble(done_data, schema_.columns[done_column_].dtype, static_cast<int64_t>(j));
    dones_[j] = done != 0.0;
    if (bootstrap_steps_ && done == 2.0) rewards_[j] = ones_[j] = 0.0;  // not a step of the episode's
  }
  Carry& carry = carries_[stream];
  // Episode returns and episode lengths (a running count: the sum of ones).
  (void)scan::EpisodicPrefixSum(scan::ScanArrays<double>{rewards_, dones_, 1, count, {&carry.return_sum, 1},
                                                         {&carry.return_done, 1}, returns_},
                                scan::Boundary::kEndsAt);
  (void)scan::EpisodicPrefixSum(scan::ScanArrays<double>{ones_, dones_, 1, count, {&carry.length_sum, 1},
                                                         {&carry.length_done, 1}, lengths_},
                                scan::Boundary::kEndsAt);
  for (size_t j = 0; j < n; ++j) {
    if (!dones_[j]) continue;
    return_max_ = episodes_ == 0 ? returns_[j] : std::max(return_max_, returns_[j]);
    ++episodes_;
    return_total_ += returns_[j];
    length_total_ += lengths_[j];
  }
}

EpisodeSummary EpisodeTracker::TakeInterval() {
  EpisodeSummary summary;
  summary.episodes = episodes_;
  if (episodes_ > 0) {
    summary.mean_return = return_total_ / episodes_;
    summary.max_return = return_max_;
    summary.mean_length = length_total_ / episodes_;
  }
  episodes_ = 0;
  return_total_ = return_max_ = length_total_ = 0.0;
  return summary;
}

}  // namespace perserve::replay
