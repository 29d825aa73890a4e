// A plain reference for StepReplay (step_replay.h), kept deliberately simple:
// every stream's whole history as vectors, and every item's sample recomputed
// from it by the header's rules, one step at a time. No ring, no lists: the
// test compares StepReplay's answers with these bit for bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "perserve/schema.h"
#include "replay/step_replay.h"

namespace perserve::replay::step_test {

struct RefStep {
  std::vector<std::vector<std::byte>> columns;  // each step column's row
  uint64_t key = 0;                             // its global key
};

struct RefItem {
  int stream = 0;
  int64_t t = 0;
  std::vector<std::vector<std::byte>> columns;  // each item column's row
};

class StepReference {
 public:
  StepReference(const StepOptions& options, const Schema& step_schema)
      : options_(options), schema_(step_schema), streams_(static_cast<size_t>(options.streams)) {
    reward_ = schema_.ColumnIndex(options.reward_column);
    done_ = schema_.ColumnIndex(options.done_column);
    depth_.assign(schema_.columns.size(), 0);  // 0: not named in the stacks
    for (const auto& [name, depth] : options.stacks) depth_[schema_.ColumnIndex(name)] = depth;
    if (options.stacks.empty() && options.kind == StepOptions::Kind::kNStep) depth_[schema_.ColumnIndex("obs")] = 1;
    for (int d : depth_) max_depth_ = std::max(max_depth_, d);
  }

  int64_t steps(int stream) const { return static_cast<int64_t>(streams_[stream].size()); }
  uint64_t next_key() const { return next_key_; }
  uint64_t OldestKeyAfter(int64_t more) const {
    const uint64_t next = next_key_ + static_cast<uint64_t>(more);
    const uint64_t capacity = static_cast<uint64_t>(options_.step_capacity);
    return next > capacity ? next - capacity : 0;
  }
  const std::vector<RefStep>& history(int stream) const { return streams_[stream]; }

  bool Done(int stream, int64_t i) const { return Row(stream, i, done_)[0] != std::byte{0}; }
  // A truncated episode's bootstrap step (done 2).
  bool Bootstrap(int stream, int64_t i) const { return Row(stream, i, done_)[0] == std::byte{2}; }
  double Reward(int stream, int64_t i) const {
    const std::vector<std::byte>& row = Row(stream, i, reward_);
    if (schema_.columns[reward_].dtype == DType::kFloat32) {
      float value;
      std::memcpy(&value, row.data(), sizeof(value));
      return value;
    }
    double value;
    std::memcpy(&value, row.data(), sizeof(value));
    return value;
  }
  // The first step of i's episode: walk back to just after a done step, or
  // to a step that began one after a restore (StartNewEpisode).
  int64_t EpisodeStart(int stream, int64_t i) const {
    while (i > 0 && !Done(stream, i - 1) && !BeginsEpisode(stream, i)) --i;
    return i;
  }
  // A restore ended the episode in progress: `stream`'s next step begins a
  // new one, whatever the step before it says (the server's
  // StepStore::StartNewEpisode). No item spans the two.
  void StartNewEpisode(int stream) { restarts_.insert({stream, steps(stream)}); }
  bool BeginsEpisode(int stream, int64_t i) const { return restarts_.count({stream, i}) != 0; }

  // Appends a stream's steps (rows[j][c]) with keys next_key() ...
  void Append(int stream, const std::vector<std::vector<std::vector<std::byte>>>& rows) {
    for (const auto& columns : rows) streams_[stream].push_back(RefStep{columns, next_key_++});
  }

  // Takes back the last `count` steps of `stream`, which must be the newest
  // steps of all (an append judged before it is known to be applied).
  void Unappend(int stream, int64_t count) {
    streams_[stream].resize(streams_[stream].size() - static_cast<size_t>(count));
    next_key_ -= static_cast<uint64_t>(count);
  }

  // Whether an item at step t of `stream` may be created once `history`
  // holds the request's steps and the ring's oldest key is oldest_key_after
  // (the header's creatability rules, said again plainly).
  bool Creatable(int stream, int64_t t, uint64_t oldest_key_after) const {
    const int64_t have = steps(stream);
    if (t < 0 || t >= have || Bootstrap(stream, t)) return false;
    const int64_t start = EpisodeStart(stream, t);
    if (streams_[stream][EarliestStep(stream, t)].key < oldest_key_after) return false;
    const bool n_step = options_.kind == StepOptions::Kind::kNStep;
    if (!n_step && (t - start) % options_.sequence_period != 0) return false;
    // The last step it needs (the successor t+n, or t+L-1) unless its
    // episode ends first; one that a restore ended (a later step begins an
    // episode) cannot be whole.
    const int64_t last = n_step ? t + options_.n_step : t + options_.sequence_length - 1;
    for (int64_t i = t; i <= last && i < have; ++i) {
      if (i > t && BeginsEpisode(stream, i)) return false;
      if (Done(stream, i)) return true;
    }
    return last < have;
  }

  // The earliest step an item at t needs: the deepest stack's first frame,
  // not before the episode's start.
  int64_t EarliestStep(int stream, int64_t t) const {
    return std::max(EpisodeStart(stream, t), t - std::max(max_depth_, 1) + 1);
  }

  // The table's items (issue 33's one item model): an item leaves when its
  // earliest step leaves the ring, or when the table is full (the oldest
  // first). Called once an append's steps are in, before its `count` new
  // items are added (AddItem), for a table of `capacity` items.
  void RemoveItemsBeforeAdd(int64_t count, int64_t capacity) {
    EvictItemsOutsideRing();
    while (count > 0 && static_cast<int64_t>(held_.size()) + count > capacity) {
      over_.erase({items_.at(*held_.begin()).stream, items_.at(*held_.begin()).t});
      held_.erase(held_.begin());
      ++pushed_out_;
    }
  }
  // The items whose earliest step left the ring leave; their keys, ascending.
  std::vector<uint64_t> EvictItemsOutsideRing() {
    std::vector<uint64_t> evicted;
    const uint64_t oldest_step = OldestKeyAfter(0);
    for (auto it = held_.begin(); it != held_.end();) {
      if (EarliestKey(*it) < oldest_step) {
        evicted.push_back(*it);
        over_.erase({items_.at(*it).stream, items_.at(*it).t});
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return evicted;
  }
  // A held item leaves (a table's remover or max_times_sampled took it).
  void RemoveItem(uint64_t key) {
    over_.erase({items_.at(key).stream, items_.at(key).t});
    held_.erase(key);
  }
  void AddItem(uint64_t key, RefItem item) {
    held_.insert(key);
    over_[{item.stream, item.t}] = key;
    items_[key] = std::move(item);
  }
  bool Held(uint64_t key) const { return held_.count(key) != 0; }
  // Whether the table holds an item over step t of `stream` (one item a step).
  bool ItemOver(int stream, int64_t t) const { return over_.count({stream, t}) != 0; }
  int64_t held_items() const { return static_cast<int64_t>(held_.size()); }
  // Items the FIFO remover took (the table full).
  int64_t pushed_out() const { return pushed_out_; }
  const RefItem& item(uint64_t key) const { return items_.at(key); }
  uint64_t EarliestKey(uint64_t item_key) const {
    const RefItem& item = items_.at(item_key);
    return streams_[item.stream][EarliestStep(item.stream, item.t)].key;
  }

  // The item's sample, one byte vector per sample column, in layout order.
  std::vector<std::vector<std::byte>> Expected(uint64_t item_key) const {
    const RefItem& item = items_.at(item_key);
    const int s = item.stream;
    const int64_t t = item.t;
    const int64_t start = EpisodeStart(s, t);
    std::vector<std::vector<std::byte>> out;
    const auto columns = static_cast<int>(schema_.columns.size());
    if (options_.kind == StepOptions::Kind::kNStep) {
      int64_t n = options_.n_step;
      bool ended = false;
      for (int64_t j = 0; j < options_.n_step; ++j) {
        if (Bootstrap(s, t + j)) {  // truncated: bootstrap from it, without its reward
          n = j;
          break;
        }
        if (Done(s, t + j)) {
          n = j + 1;
          ended = true;
          break;
        }
      }
      double ret = 0.0, g = 1.0;
      for (int64_t j = 0; j < n; ++j) {
        ret += g * Reward(s, t + j);
        g *= options_.discount;
      }
      const double discount = ended ? 0.0 : g;
      for (int c = 0; c < columns; ++c) {
        if (c != reward_ && c != done_) out.push_back(Stack(s, c, t, start));
      }
      out.push_back(Bytes(ret));
      out.push_back(Bytes(discount));
      for (int c = 0; c < columns; ++c) {
        if (depth_[c] == 0) continue;
        std::vector<std::byte> next = Stack(s, c, t + n, start, /*zeros=*/discount == 0.0);
        out.push_back(next);
      }
    } else {
      const int64_t length = options_.sequence_length;
      int64_t valid = length;
      for (int64_t j = 0; j < length; ++j) {
        if (Done(s, t + j)) {
          valid = j + 1;
          break;
        }
      }
      for (int c = 0; c < columns; ++c) {
        std::vector<std::byte> column;
        for (int64_t j = 0; j < length; ++j) {
          const std::vector<std::byte> step = Stack(s, c, t + j, start, /*zeros=*/j >= valid);
          column.insert(column.end(), step.begin(), step.end());
        }
        out.push_back(column);
      }
      std::vector<std::byte> mask;
      for (int64_t j = 0; j < length; ++j) mask.push_back(std::byte{j < valid ? uint8_t{1} : uint8_t{0}});
      out.push_back(mask);
    }
    for (const auto& column : item.columns) out.push_back(column);
    return out;
  }

 private:
  const std::vector<std::byte>& Row(int stream, int64_t i, int column) const {
    return streams_[stream][static_cast<size_t>(i)].columns[column];
  }

  template <typename T>
  static std::vector<std::byte> Bytes(T value) {
    std::vector<std::byte> bytes(sizeof(T));
    std::memcpy(bytes.data(), &value, sizeof(T));
    return bytes;
  }

  // Column c at step i, stacked to its depth (frames i-k+1 .. i, oldest
  // first, on a new last axis, or the first with frames_first; those before
  // `start` zeros), or all zeros.
  std::vector<std::byte> Stack(int s, int c, int64_t i, int64_t start, bool zeros = false) const {
    const Column& column = schema_.columns[c];
    const int64_t k = std::max(depth_[c], 1);
    const int64_t element = DTypeSize(column.dtype);
    const int64_t elements = column.ElementCount();
    std::vector<std::byte> out(static_cast<size_t>(elements * element * k), std::byte{0});
    if (zeros) return out;
    for (int64_t f = 0; f < k; ++f) {
      const int64_t frame = i - k + 1 + f;
      if (frame < start) continue;
      const std::vector<std::byte>& row = Row(s, frame, c);
      for (int64_t e = 0; e < elements; ++e) {
        const int64_t at = options_.frames_first ? f * elements + e : e * k + f;
        for (int64_t b = 0; b < element; ++b) out[at * element + b] = row[e * element + b];
      }
    }
    return out;
  }

  StepOptions options_;
  Schema schema_;
  int reward_ = -1;
  int done_ = -1;
  std::vector<int> depth_;
  int max_depth_ = 1;
  std::vector<std::vector<RefStep>> streams_;
  std::map<uint64_t, RefItem> items_;             // every item ever created
  std::set<uint64_t> held_;                        // the keys the table holds
  std::map<std::pair<int, int64_t>, uint64_t> over_;  // (stream, t) -> the held item's key
  int64_t pushed_out_ = 0;
  uint64_t next_key_ = 0;
  std::set<std::pair<int, int64_t>> restarts_;  // (stream, i): step i began an episode after a restore
};

}  // namespace perserve::replay::step_test
