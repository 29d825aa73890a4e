// Checkpoints of a replay rank: written while it serves, restored exactly.
//
// Layout: <dir>/shard-<s>-of-<K>/checkpoint-<NNNNNN>/ (one server: shard-0-of-1)
// holding (format 3: one format for every table, transitions included)
//   state.bin        the CheckpointState (cereal): format, the step schema,
//                    the step capacity, alpha, shard, the items' keys, max
//                    priority, sampling seed and counter, counters, rate
//                    limiter, episodes in progress
//   steps.bin, step-info.bin, step-column-<c>.bin
//                    the step ring (step_checkpoint.h): the flags that must
//                    match, the streams' counts, every held step
//   item-slots.bin   per held item: its key (uint64) and its slot (int64)
//   free-slots.bin   the slots ever used (int64), then the free ones below
//                    that, the one the next item takes last (int64 each):
//                    so the items after a restore take the slots the
//                    uninterrupted replay's would, and draw the same samples
//   leaves.bin       per held item: its tree leaf (double)
//   column-<c>.bin   per held item: column c of what the table stores of it
//                    (its step's key, then its item columns)
//   MANIFEST         "perserve-checkpoint <format>", then "part <file>
//                    <bytes> <hash>" for each file, then "end"
// A checkpoint is written as checkpoint-<N>.partial, every file fsync'd, the
// MANIFEST last, then renamed to checkpoint-<N> (and the directory fsync'd):
// only a complete one ever has the final name. The previous complete one is
// removed only after that.
//
// Writing without stopping the service (CheckpointWriter): Begin captures
// the small state, which slots hold which keys and the tree's leaves (a
// copy, O(slots used)); the items and the steps are then written in slices
// between the service loop's passes, straight from the table's store and
// the ring. Before an append overwrites steps or item rows not yet written,
// BeforeWrite writes them first: the checkpoint is the replay as it was at
// Begin. The fsyncs, manifest and rename run on a helper thread at the end.
//
// Restoring (LoadCheckpoint): into a replay just created with the flags;
// the flags that shape what it holds must match the checkpoint's (an error
// names both values), every file's size and hash must match its MANIFEST
// line (a truncated or corrupted file is an error), and the server does not
// serve until all of it has loaded. Checkpoints of formats 1 (a replay of
// transitions) and 2 (step streams), written before format 3, restore too:
// format 1's transitions become steps of stream 0 and the one-step items
// over them, format 2's drawable items those over its ring's steps; their
// items keep their keys and slots.
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
#include "replay/step_replay.h"
#include "service/rate_limiter.h"
#include "service/checkpoint/step_checkpoint.h"

namespace perserve::replay {

template <class Archive>
void serialize(Archive& ar, EpisodeCarry& carry) {
  ar(carry.return_sum, carry.return_done, carry.length_sum, carry.length_done);
}

}  // namespace perserve::replay

namespace perserve::service {

// What a checkpoint is written as.
inline constexpr int32_t kCheckpointFormat = checkpoint_layout::kOneModelFormat;

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
  int32_t format = kCheckpointFormat;
  std::string schema;    // the step schema's ToString() (format 2: the items' stored schema)
  int64_t capacity = 0;  // the step ring's (formats 1 and 2: the items')
  double alpha = 0.0;
  int32_t shard = 0;
  int32_t shards = 1;
  // Items held (formats 1 and 2: keys next_key - size .. next_key - 1, some
  // with leaf 0, evicted; format 3: every one drawable, in item-slots.bin).
  int64_t size = 0;
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
  // missing. `item_capacity`: the table's; the snapshot's per-slot copies
  // (17 bytes a slot) are allocated and touched now, not when a checkpoint
  // begins (fresh pages cost ~60 ms for 2^21 slots here, a stall for every
  // request).
  CheckpointWriter(std::string dir, int shard, int shards, int64_t item_capacity = 0);
  ~CheckpointWriter();

  bool active() const { return phase_ != Phase::kIdle; }
  // The last complete checkpoint written ("" before the first).
  const std::string& last_path() const { return last_path_; }
  // Where the one being written will be once complete.
  const std::string& path() const { return path_; }

  // Starts a checkpoint of `replay` as it is now; `state` its other parts
  // (the service's: shard, rate limiter, episodes; Begin fills in the
  // replay's). `replay` is read until the checkpoint is complete.
  // Errors (the directory cannot be made or written): nothing started.
  Status Begin(const replay::StepReplay& replay, CheckpointState state);

  // Writes for about `budget` (at least one slice). *done once the
  // checkpoint is complete (durable and renamed); an error abandons it (the
  // partial directory is removed, the previous checkpoint kept).
  Status Step(const replay::StepReplay& replay, std::chrono::microseconds budget, bool* done);

  // Before `steps` steps are written into the ring's next slots and items'
  // rows into `item_slots`: writes the steps and items held there that the
  // checkpoint has not written yet. An error abandons the checkpoint.
  Status BeforeWrite(const replay::StepReplay& replay, int64_t steps, std::span<const int64_t> item_slots);

  // Waits until the helper thread's part of the checkpoint (fsyncs,
  // MANIFEST, rename) is done, if it runs, so the next Step completes it:
  // for a simulation whose schedule must not depend on the file system's
  // speed. Never needed to serve.
  void AwaitFinish() const {
    if (finishing_.valid()) finishing_.wait();
  }

  // The longest a single Begin, Step or BeforeWrite took in the last
  // checkpoint, and how long it took from Begin to complete (for the log
  // and measurements).
  std::chrono::microseconds longest_step() const { return longest_step_; }
  std::chrono::microseconds last_duration() const { return last_duration_; }
  int64_t last_bytes() const { return last_bytes_; }

 private:
  enum class Phase { kIdle, kItems, kSteps, kFinishing };
  struct Part {
    explicit Part(std::string file) : name(std::move(file)) {}
    std::string name;
    int fd = -1;
    Hash64 hash;
    int64_t bytes = 0;
    std::vector<std::byte> buffer;  // written in about a slice at a time
  };
  // Writes the snapshot's items in slots [cursor_, until) not written yet.
  Status WriteItems(const replay::StepReplay& replay, int64_t until);
  Status WriteItem(const replay::Replay& items, int64_t slot);
  // Where the step ring's rows go: its parts after steps.bin.
  StepRingWriter::Sink StepSink();
  Status Append(Part* part, std::span<const std::byte> bytes);
  Status Flush(Part* part);
  // Closes the files and removes the partial directory.
  void Abandon();
  // On the helper thread: fsyncs, MANIFEST, rename, removal of older ones.
  Status Finish();
  // Runs `write`, keeping the longest; an error abandons the checkpoint.
  template <class Write>
  Status Timed(Write&& write);

  std::string shard_dir_;
  int shard_, shards_;
  Phase phase_ = Phase::kIdle;
  std::string partial_, path_, last_path_;
  // state.bin, steps.bin, the ring's rows, item-slots.bin, leaves.bin, one a column, free-slots.bin.
  std::vector<Part> parts_;
  size_t ring_parts_ = 0, item_parts_ = 0;  // the index of steps.bin's, and of item-slots.bin's
  StepRingWriter ring_;
  // The snapshot: per slot in [0, slots_), the key Begin saw (pending while
  // not written) and its leaf.
  int64_t slots_ = 0, cursor_ = 0;
  std::vector<uint64_t> keys_;
  std::vector<double> leaves_;
  std::vector<uint8_t> pending_;
  std::vector<int64_t> free_slots_;  // slots_, then the free slots
  std::future<Status> finishing_;
  std::chrono::steady_clock::time_point began_;
  std::chrono::microseconds longest_step_{0}, last_duration_{0};
  int64_t last_bytes_ = 0;
};

// Restores into `replay` (just created with the flags, empty) from `path`:
// a checkpoint directory, or a --checkpoint-dir whose shard-<s>-of-<K>
// holds one (the newest complete). *state gets the other parts, *loaded the
// checkpoint's directory. Errors name what does not match or is damaged;
// the replay must then not be used.
Status LoadCheckpoint(const std::string& path, int shard, int shards, replay::StepReplay* replay,
                      CheckpointState* state, std::string* loaded);

}  // namespace perserve::service
