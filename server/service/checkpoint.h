// Checkpoints of a replay rank: written while it serves, restored exactly.
//
// Layout: <dir>/shard-<s>-of-<K>/checkpoint-<NNNNNN>/ (one server: shard-0-of-1)
// holding
//   state.bin        the CheckpointState (cereal): format, schema, capacity,
//                    alpha, shard, keys, max priority, sampling seed and
//                    counter, counters, rate limiter, episodes in progress
//   leaves.bin       the held items' tree leaves, oldest key first (doubles)
//   column-<c>.bin   column c of the held items, oldest key first
//   (a replay of step streams adds its step ring's parts: step_checkpoint.h)
//   MANIFEST         "perserve-checkpoint <format>", then "part <file>
//                    <bytes> <hash>" for each file, then "end"
// A checkpoint is written as checkpoint-<N>.partial, every file fsync'd, the
// MANIFEST last, then renamed to checkpoint-<N> (and the directory fsync'd):
// only a complete one ever has the final name. The previous complete one is
// removed only after that.
//
// Writing without stopping the service (CheckpointWriter): Begin captures
// the small state and the tree's leaves (a copy, O(size)); the items are then
// written in slices between the service loop's passes, oldest key first,
// straight from the store. Intake overwrites the oldest items first, in the
// same order, so before an add would overwrite rows not yet written,
// BeforeAdd writes them first: the checkpoint is the replay as it was at
// Begin. The fsyncs, manifest and rename run on a helper thread at the end.
//
// Restoring (LoadCheckpoint): into a replay just created with the flags;
// the schema and capacity must match the checkpoint's (an error names both),
// every file's size and hash must match its MANIFEST line (a truncated or
// corrupted file is an error), and the server does not serve until all of it
// has loaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "perserve/status.h"
#include "replay/episode_tracker.h"
#include "replay/replay.h"
#include "service/rate_limiter.h"
#include "service/step_checkpoint.h"

namespace perserve::replay {

template <class Archive>
void serialize(Archive& ar, EpisodeCarry& carry) {
  ar(carry.return_sum, carry.return_done, carry.length_sum, carry.length_done);
}

}  // namespace perserve::replay

namespace perserve::service {

// What a checkpoint of transitions is written as (step streams: kStepFormat).
inline constexpr int32_t kCheckpointFormat = checkpoint_layout::kTransitionFormat;

// 64-bit FNV-1a over 8-byte little-endian words (bytes left over at the end
// one by one): the same value however the data is split into Update calls.
class Hash64 {
 public:
  void Update(std::span<const std::byte> bytes);
  uint64_t Finish() const;

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
  std::byte carry_[8] = {};
  size_t carried_ = 0;
};

// Everything a checkpoint keeps beside the items and their leaves.
struct CheckpointState {
  int32_t format = kCheckpointFormat;  // kStepFormat with a step ring (Begin sets it)
  std::string schema;  // Schema::ToString()
  int64_t capacity = 0;
  double alpha = 0.0;
  int32_t shard = 0;
  int32_t shards = 1;
  int64_t size = 0;  // items held, keys next_key - size .. next_key - 1
  replay::ReplayState replay;
  RateLimiterState limiter;
  std::vector<replay::EpisodeCarry> episodes;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(format, schema, capacity, alpha, shard, shards, size, replay.next_key, replay.max_priority, replay.seed,
       replay.samples_drawn, replay.counters.items_added, replay.counters.items_sampled,
       replay.counters.priorities_updated, replay.counters.stale_updates_dropped, replay.counters.priorities_dropped,
       limiter.inserted, limiter.sampled, limiter.observed, limiter.lowest, limiter.highest, episodes);
  }
};

// <dir>/shard-<s>-of-<K>
std::string ShardDirectory(const std::string& dir, int shard, int shards);

class CheckpointWriter {
 public:
  // Checkpoints go under ShardDirectory(dir, shard, shards), created if
  // missing. `capacity`: the replay's; the leaves' copy (8 bytes an item) is
  // allocated and touched now, not when a checkpoint begins (fresh pages
  // cost ~60 ms for 2^21 leaves here, a stall for every request).
  CheckpointWriter(std::string dir, int shard, int shards, int64_t capacity = 0);
  ~CheckpointWriter();

  bool active() const { return phase_ != Phase::kIdle; }
  // The last complete checkpoint written ("" before the first).
  const std::string& last_path() const { return last_path_; }
  // Where the one being written will be once complete.
  const std::string& path() const { return path_; }

  // Starts a checkpoint of `replay` as it is now; `state` its other parts;
  // `steps` (the StepReplay whose items `replay` holds, or nullptr) its step
  // ring too, read until the checkpoint is complete.
  // Errors (the directory cannot be made or written): nothing started.
  Status Begin(const replay::Replay& replay, CheckpointState state, const replay::StepReplay* steps = nullptr);

  // Writes for about `budget` (at least one slice). *done once the
  // checkpoint is complete (durable and renamed); an error abandons it (the
  // partial directory is removed, the previous checkpoint kept).
  Status Step(const replay::Replay& replay, std::chrono::microseconds budget, bool* done);

  // Before an add of `count` items to `replay`: writes every row it would
  // overwrite that is not written yet. An error abandons the checkpoint.
  Status BeforeAdd(const replay::Replay& replay, int64_t count);
  // Before an append of `steps` steps and `items` items to the step ring and
  // `replay`: BeforeAdd's, for the steps too.
  Status BeforeAppend(const replay::Replay& replay, int64_t steps, int64_t items);

  // Waits until the helper thread's part of the checkpoint (fsyncs,
  // MANIFEST, rename) is done, if it runs, so the next Step completes it:
  // for a simulation whose schedule must not depend on the file system's
  // speed. Never needed to serve.
  void AwaitFinish() const {
    if (finishing_.valid()) finishing_.wait();
  }

  // The longest a single Begin, Step or BeforeAdd took in the last checkpoint, and
  // how long it took from Begin to complete (for the log and measurements).
  std::chrono::microseconds longest_step() const { return longest_step_; }
  std::chrono::microseconds last_duration() const { return last_duration_; }
  int64_t last_bytes() const { return last_bytes_; }

 private:
  enum class Phase { kIdle, kItems, kSteps, kLeaves, kFinishing };
  struct Part {
    explicit Part(std::string file) : name(std::move(file)) {}
    std::string name;
    int fd = -1;
    Hash64 hash;
    int64_t bytes = 0;
  };
  // Writes items [written_, until) of the snapshot.
  Status WriteItems(const replay::Replay& replay, int64_t until);
  // Where the step ring's rows go: its parts after steps.bin.
  StepRingWriter::Sink StepSink();
  Status Append(Part* part, std::span<const std::byte> bytes);
  // Closes the files and removes the partial directory.
  void Abandon();
  // On the helper thread: fsyncs, MANIFEST, rename, removal of older ones.
  Status Finish();

  std::string shard_dir_;
  int shard_, shards_;
  Phase phase_ = Phase::kIdle;
  std::string partial_, path_, last_path_;
  std::vector<Part> parts_;  // state, leaves, one a column, then steps.bin and the step ring's rows
  int32_t format_ = kCheckpointFormat;
  const replay::StepReplay* steps_ = nullptr;
  size_t step_parts_ = 0;  // steps.bin's index in parts_
  StepRingWriter ring_;
  // The snapshot: what Begin saw.
  uint64_t oldest_key_ = 0, next_key_ = 0;
  int64_t size_ = 0, capacity_ = 0;
  std::vector<double> leaves_;  // the first size_ are the snapshot's
  int64_t written_ = 0;         // items written
  size_t leaves_written_ = 0;   // leaves written
  std::future<Status> finishing_;
  std::chrono::steady_clock::time_point began_;
  std::chrono::microseconds longest_step_{0}, last_duration_{0};
  int64_t last_bytes_ = 0;
};

// Restores into `replay` (created with the flags, empty) from `path`: a
// checkpoint directory, or a --checkpoint-dir whose shard-<s>-of-<K> holds
// one (the newest complete). *state gets the other parts, *loaded the
// checkpoint's directory. With `steps` (a StepReplay just created over
// `replay`) the checkpoint must be of step streams, and its step ring is
// restored into `steps` (LoadStepRing); without, of transitions. Errors name
// what does not match or is damaged; the replays must then not be used.
Status LoadCheckpoint(const std::string& path, int shard, int shards, replay::Replay* replay,
                      CheckpointState* state, std::string* loaded, replay::StepReplay* steps = nullptr);

}  // namespace perserve::service
