// StepStore: the steps of every actor's stream in one ring, each step stored
// once. Knows streams and episodes, nothing of items or priorities. Every
// server keeps its actors' data here: a transition is a step too (an add is
// an append whose steps each make the item over themselves).
//
// - Steps get global keys 0, 1, ... in append order, over all streams; the
//   ring holds the newest `capacity` of them, and an append drops the oldest
//   steps first (a FIFO ring).
// - A step also has its stream and its index in that stream (0, 1, ... per
//   stream). Within a stream keys grow with the index, so the ring drops each
//   stream's steps oldest first: a stream holds a contiguous run of indices,
//   stream_oldest(s) .. stream_steps(s) - 1, and KeyOf maps them to keys.
// - Episodes, where the store has a done column (uint8): it marks an
//   episode's last step (kTerminal: its action ended the episode;
//   kTruncated: the episode was cut off, and this step holds the observation
//   it was cut off at); the stream's next step begins a new episode. Any
//   other nonzero value is refused (CheckBatch). Each step keeps its
//   episode's first index, its done value and its reward (as a double,
//   from the reward column) beside its columns. Without a done column (a
//   store of transitions) every step's done is 0 and each stream is one
//   long episode.
//
// Slots. The columns have `capacity + slack` slots, key mod that: the
// `slack` slots past the newest step hold no step the ring still holds, so
// an append of up to `slack` steps can be received there (an MPI receive
// straight into the store, WriteRegions) before it is checked, and a
// refused one changes nothing; Commit then makes them steps.
//
// Columns live in a TransitionStore (page memory, untouched until written);
// the per-step bookkeeping is 32 bytes a slot plus 8 a held step in its
// stream's index -> key map. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "store/transition_store.h"

namespace perserve::store {

// A step's done value: 0, the episode goes on.
inline constexpr uint8_t kTerminal = 1;   // the episode ended with this step's action (no bootstrap)
inline constexpr uint8_t kTruncated = 2;  // the episode was cut off: this step is its bootstrap observation

// What the store keeps of a step beside its columns.
struct StepInfo {
  int64_t index = 0;          // in its stream
  int64_t episode_start = 0;  // the stream index of its episode's first step
  double reward = 0.0;
  int32_t stream = 0;
  uint8_t done = 0;  // 0, kTerminal or kTruncated
};

// The steps of one append before they are committed: in a request's bulk
// (each column's rows, column after column), or already in the ring's next
// slots (received there: WriteRegions).
struct StepBatch {
  int64_t steps = 0;
  std::span<const std::byte> bulk{};  // empty when in_ring
  bool in_ring = false;
};

class StepStore {
 public:
  // `reward_column` (a scalar float32 or float64) and `done_column` (a scalar
  // uint8) index `schema`, or are -1 (none: no episodes, rewards 0); the
  // caller has checked them. capacity >= 1, slack >= 0. With `prefault`,
  // every page of the steps' columns is written once now (TransitionStore's
  // prefault): the first pass through the ring pays no page faults.
  StepStore(Schema schema, int64_t capacity, int64_t slack, int streams, int reward_column, int done_column,
            bool prefault = false);

  const Schema& schema() const { return columns_.schema(); }
  // Steps the ring holds at most.
  int64_t capacity() const { return capacity_; }
  // Column slots: capacity + slack.
  int64_t slots() const { return columns_.capacity(); }
  int64_t slack() const { return slots() - capacity_; }
  bool episodic() const { return done_column_ >= 0; }
  // The reward and done columns' indices in the schema (-1: none, without episodes).
  int reward_column() const { return reward_column_; }
  int done_column() const { return done_column_; }
  int streams() const { return static_cast<int>(streams_.size()); }
  uint64_t next_key() const { return next_key_; }
  // The oldest key held (0 before the ring is full).
  uint64_t oldest_key() const { return OldestKeyAfter(0); }
  int64_t held() const { return static_cast<int64_t>(next_key_ - oldest_key()); }
  // The oldest key held after `steps` more are appended.
  uint64_t OldestKeyAfter(int64_t steps) const {
    const uint64_t next = next_key_ + static_cast<uint64_t>(steps);
    const uint64_t capacity = static_cast<uint64_t>(capacity_);
    return std::max(first_key_, next > capacity ? next - capacity : 0);
  }
  int64_t SlotOf(uint64_t key) const { return static_cast<int64_t>(key % static_cast<uint64_t>(slots())); }
  // The keys whose rows writing the next `steps` steps overwrites (slots
  // are reused once the ring has gone round): [*first, *end), empty if none.
  void OverwrittenKeys(int64_t steps, uint64_t* first, uint64_t* end) const;

  // Steps `stream` ever appended; the oldest of its indices still held
  // (== stream_steps when it holds none).
  int64_t stream_steps(int stream) const { return streams_[stream].steps; }
  int64_t stream_oldest(int stream) const {
    const Stream& s = streams_[stream];
    return s.steps - static_cast<int64_t>(s.keys.size());
  }
  // The episode start the stream's next step gets: its own index after a
  // done step, else the current episode's.
  int64_t next_episode_start(int stream) const { return streams_[stream].next_episode_start; }
  // The key of a held step: stream_oldest(stream) <= index < stream_steps(stream). O(1).
  uint64_t KeyOf(int stream, int64_t index) const {
    const Stream& s = streams_[stream];
    return s.keys[static_cast<size_t>(index - (s.steps - static_cast<int64_t>(s.keys.size())))];
  }
  // A held key's bookkeeping and column rows.
  const StepInfo& Info(uint64_t key) const { return info_[static_cast<size_t>(SlotOf(key))]; }
  const std::byte* Row(int column, uint64_t key) const { return columns_.Rows(column, SlotOf(key), 1).data(); }
  // Column `column` of `count` slots from `first_slot` (no wrap): a checkpoint's rows.
  std::span<const std::byte> Rows(int column, int64_t first_slot, int64_t count) const {
    return columns_.Rows(column, first_slot, count);
  }
  // The columns, for replies sent straight from the store (rows: SlotOf of step keys).
  const TransitionStore& columns() const { return columns_; }

  // A batch's done value and reward of step j (0 and 0.0 without the columns).
  uint8_t Done(const StepBatch& batch, int64_t j) const;
  double Reward(const StepBatch& batch, int64_t j) const;
  // A batch's byte counts (in the bulk: exactly its columns), its size (1 ..
  // capacity) and every done value 0, kTerminal or kTruncated
  // (InvalidArgument naming the step and value).
  Status CheckBatch(const StepBatch& batch) const;

  // Where the columns of the next `steps` steps go, in the wire layout's
  // order (TransitionStore::Regions): for a receive straight into the ring.
  // steps <= slack: the slots hold no step the ring still holds.
  void WriteRegions(int64_t steps, std::vector<std::span<std::byte>>* regions);

  // Appends a checked batch (its columns copied from the bulk, or already in
  // the ring's next slots) to `stream`: keys next_key() .., indices
  // stream_steps(stream) ..; the steps it pushes out of the ring leave their
  // streams. O(bytes + steps).
  void Commit(int stream, const StepBatch& batch);

  // Restoring from a checkpoint, into a store just created (nothing appended
  // yet): StartRestore says the oldest key held (keys below it were never
  // held here) and, per stream, the index and episode start its first held
  // step gets (for a stream holding none: its step count and next episode
  // start); streams grows to first_index.size() when that is more. The held
  // steps then go in with Commit, oldest key first, one call per run of one
  // stream's steps: every step's index, episode start, reward and done come
  // out exactly as when they were first appended. StartNewEpisodes then
  // begins a new episode at every stream's next step.
  void StartRestore(uint64_t first_key, std::span<const int64_t> first_index,
                    std::span<const int64_t> episode_start);
  void StartNewEpisodes() {
    for (Stream& s : streams_) s.next_episode_start = s.steps;
  }
  // The same for one stream (a restore's: where a held step began a new episode so).
  void StartNewEpisode(int stream) {
    Stream& s = streams_[static_cast<size_t>(stream)];
    s.next_episode_start = s.steps;
  }
  // Streams grow to `streams` (never shrink).
  void GrowStreams(int streams) {
    if (streams > this->streams()) streams_.resize(static_cast<size_t>(streams));
  }

 private:
  struct Stream {
    int64_t steps = 0;
    int64_t next_episode_start = 0;
    std::deque<uint64_t> keys;  // of indices stream_oldest .. steps - 1
  };
  // Step j's row of `column` in the batch.
  const std::byte* BatchRow(const StepBatch& batch, int column, int64_t j) const;

  TransitionStore columns_;
  int64_t capacity_;
  std::vector<int64_t> column_offsets_;  // bytes before each column in a batch, per step of the batch
  int reward_column_;
  int done_column_;
  std::vector<StepInfo> info_;  // per slot
  std::vector<Stream> streams_;
  uint64_t next_key_ = 0;
  uint64_t first_key_ = 0;  // keys below it were never held here (a restore's)
};

}  // namespace perserve::store
