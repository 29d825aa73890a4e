// Checkpoints of a replay rank: written while it serves, restored exactly.
//
// Layout: <dir>/shard-<s>-of-<K>/checkpoint-<NNNNNN>/ (one server: shard-0-of-1)
// holding (format 4: every table of the StepReplay, whatever its layout,
// sampler and remover)
//   state.bin        the CheckpointState (cereal): format, the step schema,
//                    the step capacity, shard, episodes in progress, then
//                    per table (TableCheckpointState, table_checkpoint.h):
//                    its name, its flags (layout, max items, sampler,
//                    remover, max_times_sampled, alpha), items held, next
//                    key, max priority, sampling seed and counter,
//                    counters, rate limiter
//   steps.bin, step-info.bin, step-column-<c>.bin
//                    the step ring (step_checkpoint.h): the flags that must
//                    match, the streams' counts, every held step
//   per table t (0, 1, ...: the server's order):
//   table-<t>-item-slots.bin  per held item: its key (uint64), slot (int64)
//   table-<t>-free-slots.bin  the slots ever used (int64), then the free
//                    ones below that, the one the next item takes last
//                    (int64 each): so the items after a restore take the
//                    slots the uninterrupted replay's would, and draw the
//                    same samples
//   table-<t>-leaves.bin      per held item: its tree leaf (double)
//   table-<t>-column-<c>.bin  per held item: column c of what the table
//                    stores of it (its step's key, then its item columns)
//   table-<t>-selectors.bin   the table's Replay::Selectors() (cereal
//                    SelectorState: each held key's priority and times
//                    sampled, the sampler's and remover's rebuild orders;
//                    empty for the prioritized sampler, the fifo remover
//                    and no max_times_sampled)
//   MANIFEST         "perserve-checkpoint <format>", then "part <file>
//                    <bytes> <hash>" for each file, then "end"
// A checkpoint is written as checkpoint-<N>.partial, every file fsync'd, the
// MANIFEST last, then renamed to checkpoint-<N> (and the directory fsync'd):
// only a complete one ever has the final name. The previous complete one is
// removed only after that.
//
// Writing without stopping the service (CheckpointWriter): Begin captures
// the small state and per table which slots hold which keys, the tree's
// leaves (a copy, O(slots used)) and its selectors (O(n log n) for a
// sampler or remover other than the defaults); the items and the steps are
// then written in slices between the service loop's passes, straight from
// each table's store and the ring. Before an append overwrites steps or
// item rows of any table not yet written, BeforeWrite and BeforeCommit
// write them first: the checkpoint is the replay as it was at Begin. (An
// item a draw removed since, max_times_sampled, keeps its row until an
// append takes its slot: that append's planned slots name it.) The fsyncs,
// manifest and rename run on a helper thread at the end.
//
// Restoring (LoadCheckpoint): into a replay just created with the flags;
// the flags that shape what it holds must match the checkpoint's (an error
// names both values, and the table), every file's size and hash must match
// its MANIFEST line (a truncated or corrupted file is an error), and the
// server does not serve until all of it has loaded. Checkpoints of formats
// 1 (a replay of transitions), 2 (step streams) and 3 (the one item model's
// table 0: item-slots.bin, free-slots.bin, leaves.bin, column-<c>.bin, its
// values in state.bin's own fields), written before format 4, restore too,
// into a server of one table with the default sampler and remover: format
// 1's transitions become steps of stream 0 and the one-step items over
// them, format 2's drawable items those over its ring's steps; their items
// keep their keys and slots.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "perserve/status.h"
#include "replay/episode_tracker.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/rate_limiter.h"
#include "service/checkpoint/file_system.h"
#include "service/service_clock.h"
#include "service/checkpoint/step_checkpoint.h"
#include "service/checkpoint/table_checkpoint.h"

namespace perserve::replay {

template <class Archive>
void serialize(Archive& ar, EpisodeCarry& carry) {
  ar(carry.return_sum, carry.return_done, carry.length_sum, carry.length_done);
}

}  // namespace perserve::replay

namespace perserve::service {

// What a checkpoint is written as.
inline constexpr int32_t kCheckpointFormat = checkpoint_layout::kTablesFormat;

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
  int32_t shard = 0;
  int32_t shards = 1;
  std::vector<replay::EpisodeCarry> episodes;
  // Format 4: every table's, in the server's order. The service gives each
  // table's limiter (Begin fills in the rest); a restore of any format gives
  // one a table restored (formats 1 to 3: table 0's, from the fields below).
  std::vector<TableCheckpointState> tables;
  // Table 0's, as formats 1 to 3 keep them (a restore of format 4 mirrors
  // tables[0] here; Begin takes `limiter` for table 0 when `tables` is empty).
  double alpha = 0.0;
  // Items held (formats 1 and 2: keys next_key - size .. next_key - 1, some
  // with leaf 0, evicted; format 3: every one drawable, in item-slots.bin).
  int64_t size = 0;
  replay::ReplayState replay;
  RateLimiterState limiter;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(format);
    if (format >= checkpoint_layout::kTablesFormat) {
      ar(schema, capacity, shard, shards, episodes, tables);
      return;
    }
    ar(schema, capacity, alpha, shard, shards, size, replay.next_key, replay.max_priority, replay.seed,
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
  // missing. `item_capacities`: each table's; the snapshot's per-slot copies
  // (17 bytes a slot of every table) are allocated and touched now, not
  // when a checkpoint begins (fresh pages cost ~60 ms for 2^21 slots here, a
  // stall for every request). Every file and directory operation goes
  // through `file_system` (not owned; it outlives the writer). `clock`: the
  // service's, which Step's budget and the durations below are measured on.
  CheckpointWriter(std::string dir, int shard, int shards, std::vector<int64_t> item_capacities,
                   FileSystem* file_system = PosixFileSystem(), ServiceClock clock = {});
  // One table of `item_capacity` slots (0: allocated at the first Begin).
  CheckpointWriter(std::string dir, int shard, int shards, int64_t item_capacity = 0,
                   FileSystem* file_system = PosixFileSystem())
      : CheckpointWriter(std::move(dir), shard, shards, std::vector<int64_t>{item_capacity}, file_system) {}
  ~CheckpointWriter();

  bool active() const { return phase_ != Phase::kIdle; }
  // The last complete checkpoint written ("" before the first).
  const std::string& last_path() const { return last_path_; }
  // Where the one being written will be once complete.
  const std::string& path() const { return path_; }

  // Starts a checkpoint of `replay` (every table) as it is now; `state` its
  // other parts (the service's: shard, each table's rate limiter, episodes;
  // Begin fills in the rest). `replay` is read until the checkpoint is
  // complete. Errors (the directory cannot be made or written): nothing
  // started.
  Status Begin(const replay::StepReplay& replay, CheckpointState state);

  // Writes for about `budget` (at least one slice). *done once the
  // checkpoint is complete (durable and renamed); an error abandons it (the
  // partial directory is removed, the previous checkpoint kept).
  Status Step(const replay::StepReplay& replay, std::chrono::microseconds budget, bool* done);

  // Before `steps` steps are written into the ring's next slots: writes the
  // steps held there that the checkpoint has not written yet. An error
  // abandons the checkpoint.
  Status BeforeWrite(const replay::StepReplay& replay, int64_t steps);
  // Before the append StepReplay::Prepare just planned commits, writing
  // `steps` steps into the ring's next slots (0: they are there already)
  // and items into every table's planned_item_slots(): writes what the
  // checkpoint still needs there, steps and item rows. An error abandons
  // the checkpoint.
  Status BeforeCommit(const replay::StepReplay& replay, int64_t steps);

  // Waits until the helper thread's part of the checkpoint (fsyncs,
  // MANIFEST, rename) is done, if it runs, so the next Step completes it:
  // for a simulation whose schedule must not depend on the file system's
  // speed. Never needed to serve.
  void AwaitFinish() const {
    if (finishing_.valid()) finishing_.wait();
  }

  // The longest a single Begin, Step or BeforeWrite took in the last
  // checkpoint, and how long it took from Begin to complete (for the log
  // and measurements; on the writer's clock).
  std::chrono::microseconds longest_step() const { return longest_step_; }
  std::chrono::microseconds last_duration() const { return last_duration_; }
  int64_t last_bytes() const { return last_bytes_; }

 private:
  enum class Phase { kIdle, kItems, kSteps, kFinishing };
  struct Part {
    explicit Part(std::string file) : name(std::move(file)) {}
    std::string name;
    std::unique_ptr<WritableFile> file;
    Hash64 hash;
    int64_t bytes = 0;
    std::vector<std::byte> buffer;  // written in about a slice at a time
  };
  // One table's snapshot: per slot in [0, slots), the key Begin saw
  // (pending while not written) and its leaf; its free slots and selectors.
  struct TableSnapshot {
    size_t first_part = 0;  // its item-slots part; then leaves, its columns, free slots, selectors
    size_t columns = 0;     // of what its Replay stores
    int64_t slots = 0, cursor = 0;
    std::vector<uint64_t> keys;
    std::vector<double> leaves;
    std::vector<uint8_t> pending;
    std::vector<int64_t> free_slots;  // slots, then the free slots
    std::string selectors;            // the encoded SelectorState
  };
  // Captures a table's snapshot of `items` (Begin's part; writes nothing).
  Status Snapshot(const replay::Replay& items, TableSnapshot* table);
  // Writes table t's items in slots [cursor, until) not written yet.
  Status WriteItems(const replay::StepReplay& replay, size_t t, int64_t until);
  Status WriteItem(const replay::Replay& items, TableSnapshot* table, int64_t slot);
  // Table t's free slots and selectors, once its items are written.
  Status WriteTableTail(size_t t);
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

  FileSystem& file_system_;
  std::string shard_dir_;
  int shard_, shards_;
  ServiceClock clock_;
  Phase phase_ = Phase::kIdle;
  std::string partial_, path_, last_path_;
  // state.bin, steps.bin, the ring's rows, then each table's parts.
  std::vector<Part> parts_;
  size_t ring_parts_ = 0;  // the index of steps.bin's
  StepRingWriter ring_;
  std::vector<TableSnapshot> tables_;
  size_t table_cursor_ = 0;  // the table whose items are being written
  std::future<Status> finishing_;
  std::chrono::steady_clock::time_point began_;
  std::chrono::microseconds longest_step_{0}, last_duration_{0};
  int64_t last_bytes_ = 0;
};

// Restores into `replay` (just created with the flags, empty) from `path`:
// a checkpoint directory, or a --checkpoint-dir whose shard-<s>-of-<K>
// holds one (the newest complete). *state gets the other parts, *loaded the
// checkpoint's directory. Errors name what does not match or is damaged;
// the replay must then not be used. Everything is read through `file_system`.
Status LoadCheckpoint(const std::string& path, int shard, int shards, replay::StepReplay* replay,
                      CheckpointState* state, std::string* loaded, FileSystem* file_system = PosixFileSystem());

}  // namespace perserve::service
