#include "service/checkpoint/step_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include <cereal/archives/binary.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/coverage_marks.h"
#include "proto/bounded_input_archive.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service {
namespace {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

// steps.bin holds a few flags and two counts per stream: far below this.
constexpr int64_t kMaxStepStateBytes = int64_t{64} << 20;
// Streams are a job's ranks: far below this.
constexpr size_t kMaxStreams = size_t{1} << 20;
// Step keys count appends of at most a ring each: far below this, and sums
// of stream counts stay clear of overflow.
constexpr uint64_t kMaxStepKey = uint64_t{1} << 62;

// The flags, the key and the streams' counts: against this server and each other.
Status ValidateStepState(const std::string& dir, const StepCheckpointState& state, const replay::StepReplay& steps,
                         int32_t format) {
  const std::string file = (fs::path(dir) / kStepStateFile).string();
  auto bad = [&](std::string_view field, const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}: {} {} (damaged)", file, field, what));
  };
  const auto flags = StepFlags(steps, format);
  if (state.flags.size() != flags.size()) {
    return bad("flags", fmt::format("lists {} step flags; a step checkpoint lists {}", state.flags.size(), flags.size()));
  }
  for (size_t i = 0; i < flags.size(); ++i) {
    if (state.flags[i].first != flags[i].first) {
      return bad("flags", fmt::format("name {} where {} belongs", state.flags[i].first, flags[i].first));
    }
    if (state.flags[i].second != flags[i].second) {
      return Status::FailedPrecondition(fmt::format(
          "{} was written with {} {}; this server has {} {} (restore with the flags it was written with)", dir,
          flags[i].first, state.flags[i].second, flags[i].first, flags[i].second));
    }
  }
  if (state.next_key > kMaxStepKey) return bad("next key", fmt::format("{} is past 2^62", state.next_key));
  const size_t streams = state.stream_steps.size();
  if (streams == 0 || streams > kMaxStreams || state.next_episode_start.size() != streams) {
    return bad("streams", fmt::format("{} step counts and {} episode starts: one each per stream, 1 to {} streams",
                                      streams, state.next_episode_start.size(), kMaxStreams));
  }
  uint64_t total = 0;
  for (size_t s = 0; s < streams; ++s) {
    const int64_t count = state.stream_steps[s], start = state.next_episode_start[s];
    if (count < 0 || static_cast<uint64_t>(count) > state.next_key || start < 0 || start > count) {
      return bad("streams", fmt::format("stream {} appended {} steps, its next episode starting at {}: not in "
                                        "[0, {} steps appended in all]",
                                        s, count, start, state.next_key));
    }
    total += static_cast<uint64_t>(count);
    if (total > state.next_key) break;
  }
  if (total != state.next_key) {
    return bad("streams", fmt::format("the streams' step counts sum to {} or more; the next key says {} steps were "
                                      "appended",
                                      total, state.next_key));
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> StepFlags(const replay::StepReplay& steps, int32_t format) {
  using Kind = replay::StepOptions::Kind;
  const replay::StepOptions& o = steps.options();
  if (format >= checkpoint_layout::kTablesFormat) {
    // The ring's alone: each table's layout is its own (TableCheckpointFlags).
    const store::StepStore& ring = steps.steps();
    const auto column = [&](int index) {
      return index >= 0 ? steps.step_schema().columns[static_cast<size_t>(index)].name : std::string("none");
    };
    return {{"--column", steps.step_schema().ToString()},
            {"--capacity", fmt::format("{}", o.step_capacity)},
            {"--reward-column", column(ring.reward_column())},
            {"--done-column", column(ring.done_column())}};
  }
  const bool n_step = o.kind == Kind::kNStep, sequence = o.kind == Kind::kSequence;
  std::vector<std::string> stacks;
  for (const auto& [name, depth] : o.stacks) stacks.push_back(fmt::format("{}:{}", name, depth));
  const std::string none = "none";
  std::vector<std::pair<std::string, std::string>> flags{
      {"--column", steps.step_schema().ToString()},
      {"--capacity", fmt::format("{}", o.step_capacity)},
      {"--n-step", n_step ? fmt::format("{}", o.n_step) : none},
      {"--discount", n_step ? fmt::format("{}", o.discount) : none},  // shortest round trip: equal text, equal bits
      {"--sequence-length", sequence ? fmt::format("{}", o.sequence_length) : none},
      {"--sequence-period", sequence ? fmt::format("{}", o.sequence_period) : none},
      {"--stack", stacks.empty() ? none : fmt::format("{}", fmt::join(stacks, " "))},
      {"--reward-column", n_step || sequence ? o.reward_column : none},
      {"--done-column", n_step || sequence ? o.done_column : none},
      {"--item-column", o.item_columns.empty() ? none : Schema{o.item_columns}.ToString()}};
  if (format >= checkpoint_layout::kOneModelFormat) {
    flags.emplace_back("--max-items", fmt::format("{}", steps.items().capacity()));
  }
  return flags;
}

std::string StepColumnFile(size_t column) { return fmt::format("step-column-{}.bin", column); }

std::vector<std::string> StepRingWriter::RowPartNames(const Schema& step_schema) {
  std::vector<std::string> names{kStepInfoFile};
  for (size_t c = 0; c < step_schema.columns.size(); ++c) names.push_back(StepColumnFile(c));
  return names;
}

std::string StepRingWriter::Begin(const replay::StepReplay& steps) {
  const store::StepStore& ring = steps.steps();
  first_key_ = ring.oldest_key();
  held_ = static_cast<int64_t>(ring.next_key() - first_key_);
  written_ = 0;
  StepCheckpointState state;
  state.flags = StepFlags(steps, checkpoint_layout::kTablesFormat);
  state.next_key = ring.next_key();
  for (int s = 0; s < ring.streams(); ++s) {
    state.stream_steps.push_back(ring.stream_steps(s));
    state.next_episode_start.push_back(ring.next_episode_start(s));
  }
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(state);
  }
  return bytes.str();
}

Status StepRingWriter::Write(const store::StepStore& ring, int64_t until, const Sink& sink) {
  const int64_t rows_per_slice = RowsPerSlice(ring.schema());
  while (written_ < until) {
    const uint64_t key = first_key_ + static_cast<uint64_t>(written_);
    const int64_t slot = ring.SlotOf(key);
    const int64_t rows = std::min({until - written_, rows_per_slice, ring.slots() - slot});  // no wrap
    info_.resize(static_cast<size_t>(3 * rows));
    for (int64_t j = 0; j < rows; ++j) {
      const store::StepInfo& info = ring.Info(key + static_cast<uint64_t>(j));
      info_[3 * j] = info.stream;
      info_[3 * j + 1] = info.index;
      info_[3 * j + 2] = info.episode_start;
    }
    PERSERVE_RETURN_IF_ERROR(sink(0, std::as_bytes(std::span(info_))));
    for (size_t c = 0; c < ring.schema().columns.size(); ++c) {
      PERSERVE_RETURN_IF_ERROR(sink(1 + c, ring.Rows(static_cast<int>(c), slot, rows)));
    }
    written_ += rows;
  }
  return Status::Ok();
}

Status StepRingWriter::WriteSlice(const store::StepStore& ring, const Sink& sink) {
  return Write(ring, std::min(held_, written_ + RowsPerSlice(ring.schema())), sink);
}

Status StepRingWriter::BeforeWrite(const store::StepStore& ring, int64_t steps, const Sink& sink) {
  uint64_t first = 0, end = 0;
  ring.OverwrittenKeys(steps, &first, &end);
  const int64_t overwritten_end = static_cast<int64_t>(end) - static_cast<int64_t>(first_key_);
  if (overwritten_end <= written_) return Status::Ok();
  PERSERVE_MARK("checkpoint: ring steps written before an append overwrites them");
  return Write(ring, std::min(overwritten_end, held_), sink);
}

Status ReadStepState(FileSystem& file_system, const std::string& dir, const Manifest& parts,
                     const replay::StepReplay& steps, int32_t format, StepCheckpointState* state) {
  PERSERVE_RETURN_IF_ERROR(ReadEncodedPart(file_system, dir, kStepStateFile, parts, kMaxStepStateBytes, state));
  return ValidateStepState(dir, *state, steps, format);
}

Status LoadStepRing(FileSystem& file_system, const std::string& dir, const Manifest& parts,
                    const StepCheckpointState& state, replay::StepReplay* steps) {
  std::string bytes;
  const std::string info_file = (fs::path(dir) / kStepInfoFile).string();
  const int64_t held = static_cast<int64_t>(std::min<uint64_t>(state.next_key, steps->options().step_capacity));
  const uint64_t first_key = state.next_key - static_cast<uint64_t>(held);

  // Every held step's stream; each stream's held run must end at its count.
  PERSERVE_RETURN_IF_ERROR(
      ReadPart(file_system, dir, kStepInfoFile, parts, held * kStepInfoBytes, held * kStepInfoBytes, &bytes));
  std::vector<int64_t> info(static_cast<size_t>(3 * held));
  if (held > 0) std::memcpy(info.data(), bytes.data(), bytes.size());
  const size_t streams = state.stream_steps.size();
  std::vector<int64_t> count(streams, 0), first_index(streams), first_start(streams);
  for (int64_t i = 0; i < held; ++i) {
    const int64_t stream = info[3 * i];
    if (stream < 0 || static_cast<uint64_t>(stream) >= streams) {
      return Status::InvalidArgument(fmt::format("{}: step key {}: stream {} is outside [0, {}) (damaged)", info_file,
                                                 first_key + static_cast<uint64_t>(i), stream, streams));
    }
    if (count[stream]++ == 0) first_index[stream] = info[3 * i + 1], first_start[stream] = info[3 * i + 2];
  }
  for (size_t s = 0; s < streams; ++s) {
    if (count[s] == 0) {
      first_index[s] = state.stream_steps[s];
      first_start[s] = state.next_episode_start[s];
    } else if (first_index[s] != state.stream_steps[s] - count[s] || first_start[s] < 0 ||
               first_start[s] > first_index[s]) {
      return Status::InvalidArgument(fmt::format(
          "{}: stream {} holds {} steps, the first at index {} of an episode from {}; its {} steps appended put "
          "the first at {} (damaged)",
          info_file, s, count[s], first_index[s], first_start[s], state.stream_steps[s],
          state.stream_steps[s] - count[s]));
    }
  }
  PERSERVE_RETURN_IF_ERROR(steps->StartRestore(first_key, first_index, first_start));

  // The steps, in chunks of rows (each file's size checked first, its hash as
  // it is read), appended again run by run of one stream.
  const Schema& schema = steps->step_schema();
  const size_t columns = schema.columns.size();
  std::vector<std::unique_ptr<SequentialFile>> files(columns);
  std::vector<Hash64> hashes(columns);
  std::vector<uint64_t> expected_hashes(columns);
  for (size_t c = 0; c < columns; ++c) {
    ManifestPart part;
    PERSERVE_RETURN_IF_ERROR(
        FindPart(file_system, dir, StepColumnFile(c), parts, held * schema.columns[c].ItemBytes(), &part));
    expected_hashes[c] = part.hash;
    PERSERVE_RETURN_IF_ERROR(file_system.NewSequentialFile(fmt::format("{}/{}", dir, StepColumnFile(c)), &files[c]));
  }
  // A step the ring refuses as an append's is refused for its done value: the byte counts are the files'.
  const int done_column = steps->steps().episodic() ? schema.ColumnIndex(steps->options().done_column) : 0;
  const std::string done_file = StepColumnFile(static_cast<size_t>(std::max(0, done_column)));
  const int64_t rows_per_chunk = RowsPerSlice(schema);
  std::vector<std::byte> chunk, run;
  for (int64_t row = 0; row < held; row += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, held - row);
    chunk.resize(static_cast<size_t>(rows * schema.ItemBytes()));
    std::byte* out = chunk.data();
    for (size_t c = 0; c < columns; ++c) {
      const size_t length = static_cast<size_t>(rows * schema.columns[c].ItemBytes());
      PERSERVE_RETURN_IF_ERROR(files[c]->Read(std::span(out, length)));
      hashes[c].Update(std::span<const std::byte>(out, length));
      out += length;
    }
    // A held step that begins an episode (its episode start its own index)
    // the step before it did not end (done 0) was the first its stream
    // appended after a restore (StepReplay::EndRestore): it goes in after the
    // stream begins a new episode, as it did then. Runs split there.
    const auto begins_episode = [&](int64_t i) { return info[3 * i + 2] == info[3 * i + 1]; };
    for (int64_t a = 0, b = 0; a < rows; a = b) {
      const int64_t stream = info[3 * (row + a)];
      for (b = a + 1; b < rows && info[3 * (row + b)] == stream && !begins_episode(row + b);) ++b;
      if (begins_episode(row + a)) {
        const store::StepStore& ring = steps->steps();
        if (ring.next_episode_start(static_cast<int>(stream)) != ring.stream_steps(static_cast<int>(stream))) {
          PERSERVE_MARK("restore: a held step began an episode after an earlier restore");
        }
        steps->mutable_steps().StartNewEpisode(static_cast<int>(stream));
      }
      run.resize(static_cast<size_t>((b - a) * schema.ItemBytes()));
      std::byte* to = run.data();
      const std::byte* column = chunk.data();
      for (size_t c = 0; c < columns; ++c) {
        const int64_t row_bytes = schema.columns[c].ItemBytes();
        std::memcpy(to, column + a * row_bytes, static_cast<size_t>((b - a) * row_bytes));
        to += (b - a) * row_bytes;
        column += rows * row_bytes;
      }
      const Status restored = steps->RestoreSteps(static_cast<int>(stream), b - a, run);
      if (!restored.ok()) {
        return Status::InvalidArgument(fmt::format("{}/{}: held steps {} .. {}: {} (damaged)", dir, done_file,
                                                   row + a, row + b - 1, restored.message()));
      }
    }
  }
  for (size_t c = 0; c < columns; ++c) {
    if (hashes[c].Finish() != expected_hashes[c]) return HashMismatch(dir, StepColumnFile(c));
  }

  // The bookkeeping the appends derived (indices from the counts, episode
  // starts from the done flags) must be the checkpoint's.
  const store::StepStore& ring = steps->steps();
  for (int64_t i = 0; i < held; ++i) {
    const uint64_t key = first_key + static_cast<uint64_t>(i);
    const store::StepInfo& derived = ring.Info(key);
    if (derived.index != info[3 * i + 1] || derived.episode_start != info[3 * i + 2]) {
      return Status::InvalidArgument(fmt::format(
          "{}: step key {} of stream {}: index {}, episode start {}; its stream's held steps and done flags give "
          "index {}, episode start {} (damaged)",
          info_file, key, derived.stream, info[3 * i + 1], info[3 * i + 2], derived.index, derived.episode_start));
    }
  }
  // A next episode start at the stream's count: restored, the stream has appended nothing since.
  for (size_t s = 0; s < streams; ++s) {
    if (ring.next_episode_start(static_cast<int>(s)) != state.next_episode_start[s] &&
        state.next_episode_start[s] != state.stream_steps[s]) {
      return Status::InvalidArgument(fmt::format(
          "{}/{}: stream {}'s next episode starts at {}; its held steps' done flags give {} (damaged)", dir,
          kStepStateFile, s, state.next_episode_start[s], ring.next_episode_start(static_cast<int>(s))));
    }
  }

  return Status::Ok();
}

}  // namespace perserve::service
