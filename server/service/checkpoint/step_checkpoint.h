// A checkpoint's step ring (docs/checkpoints.md): what a checkpoint keeps
// of a StepReplay's StepStore, written while the service appends, and
// restored exactly. (Formats 2 to 4 alike but for the flags: StepFlags.)
//
// Parts:
//   steps.bin            StepCheckpointState (cereal): the flags that must
//                        match, the next step key, every stream's step
//                        count and next episode start
//   step-info.bin        per held step, oldest key first: its stream, its
//                        index in the stream, its episode's first index
//                        (three little-endian int64)
//   step-column-<c>.bin  step column c of the held steps, oldest key first
// The held steps are keys next_key - min(next_key, step capacity) ..
// next_key - 1. Rewards and done flags are not stored apart: the restore
// derives them from the columns as an append does.
//
// Writing (StepRingWriter, driven by CheckpointWriter): Begin captures the
// small state and which keys are held; the steps are then written in slices
// between passes, oldest key first, straight from the ring. Before an append
// writes the ring's next slots (which held steps long gone, or ones the ring
// dropped since Begin), BeforeWrite writes the steps there not yet written:
// the checkpoint is the ring as it was at Begin.
//
// Restoring (LoadStepRing): every field is checked before it is used, and
// the steps go back through StepReplay's restore, which derives each step's
// bookkeeping as the append did; the checkpoint's must agree.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cereal/types/string.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>

#include "perserve/status.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint/checkpoint_layout.h"

namespace perserve::service {

// The flags a restore must share with the checkpoint's ring, as (flag,
// value): format 4 --column, --capacity, --reward-column and --done-column
// (each table's own: TableCheckpointFlags); formats 2 and 3 --column, --capacity,
// --n-step, --discount, --sequence-length, --sequence-period, --stack,
// --reward-column, --done-column, --item-column of table 0, and (format 3)
// --max-items.
std::vector<std::pair<std::string, std::string>> StepFlags(const replay::StepReplay& steps, int32_t format);

struct StepCheckpointState {
  std::vector<std::pair<std::string, std::string>> flags;
  uint64_t next_key = 0;
  std::vector<int64_t> stream_steps;
  std::vector<int64_t> next_episode_start;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(flags, next_key, stream_steps, next_episode_start);
  }
};

// step-column-<c>.bin.
std::string StepColumnFile(size_t column);
inline constexpr const char* kStepStateFile = "steps.bin";
inline constexpr const char* kStepInfoFile = "step-info.bin";
inline constexpr int64_t kStepInfoBytes = 3 * sizeof(int64_t);

class StepRingWriter {
 public:
  // Where the rows go: part 0 step-info.bin, part 1 + c step-column-<c>.bin.
  using Sink = std::function<Status(size_t part, std::span<const std::byte> bytes)>;

  // The parts after steps.bin, in Sink's order.
  static std::vector<std::string> RowPartNames(const Schema& step_schema);

  // Captures which steps are held now; gives steps.bin's bytes.
  std::string Begin(const replay::StepReplay& steps);
  bool done() const { return written_ == held_; }
  // Writes one slice (about checkpoint_layout::kSliceBytes) of the steps not written yet.
  Status WriteSlice(const store::StepStore& ring, const Sink& sink);
  // Before `steps` steps are written into the ring's next slots: writes the
  // held steps there not written yet.
  Status BeforeWrite(const store::StepStore& ring, int64_t steps, const Sink& sink);

 private:
  Status Write(const store::StepStore& ring, int64_t until, const Sink& sink);

  uint64_t first_key_ = 0;
  int64_t held_ = 0, written_ = 0;
  std::vector<int64_t> info_;  // scratch: a slice's step-info records
};

// Reads and checks steps.bin of a format 2 or 3 checkpoint in `dir` (its
// MANIFEST's `parts`) against `steps`: FailedPrecondition for flags that
// differ (naming both values), checked before anything else of the
// checkpoint so that the error names the flag.
Status ReadStepState(FileSystem& file_system, const std::string& dir, const checkpoint_layout::Manifest& parts,
                     const replay::StepReplay& steps, int32_t format, StepCheckpointState* state);
// Restores the step ring `state` describes into `steps` (just created): its
// held steps, each checked, and its streams. Errors name the file and the
// field. The items come after (StepReplay::RestoreItems, then EndRestore).
Status LoadStepRing(FileSystem& file_system, const std::string& dir, const checkpoint_layout::Manifest& parts,
                    const StepCheckpointState& state, replay::StepReplay* steps);

}  // namespace perserve::service
