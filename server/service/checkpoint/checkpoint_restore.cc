// Restoring a checkpoint (LoadCheckpoint, checkpoint.h): everything read from
// disk is checked before the replay takes it. A checkpoint directory is input
// from outside like a client's message: a disk, a copy or a person can damage
// any byte of it. So every field of the MANIFEST is parsed with checked
// conversions, every file's size and hash must match its MANIFEST line, and
// every value of the state is checked against its range and against this
// server (schema, capacity, alpha, shard, the shard's key space) before any of
// it is used. Any failure is a Status naming the file and the field; nothing
// here throws past LoadCheckpoint.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "proto/bounded_input_archive.h"
#include "proto/messages.h"
#include "service/checkpoint/checkpoint.h"
#include "service/checkpoint/checkpoint_layout.h"
#include "service/checkpoint/table_checkpoint.h"
#include "table/selector.h"
#include "tree/tree_validation.h"

namespace perserve::service {
namespace {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

// A MANIFEST lists a few files (one per column): far below this.
constexpr uintmax_t kMaxManifestBytes = uintmax_t{1} << 20;
// state.bin holds a few counters, the schema's text and one episode carry per
// client: far below this.
constexpr int64_t kMaxStateBytes = int64_t{64} << 20;

// The whole of `text` as an integer in `base`, or false (empty, a sign where
// none may be, trailing characters, out of range).
template <class Int>
bool ParseWhole(std::string_view text, Int* value, int base = 10) {
  if (text.empty() || text.front() == '+') return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value, base);
  return error == std::errc() && end == text.data() + text.size();
}

// The words of a line separated by single spaces (an empty word, from two
// spaces or one at an end, is kept, so such a line fails its check).
std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t start = 0;
  while (true) {
    const size_t space = line.find(' ', start);
    words.push_back(line.substr(start, space == std::string_view::npos ? std::string_view::npos : space - start));
    if (space == std::string_view::npos) return words;
    start = space + 1;
  }
}

// A table's part (format 3's; format 4's after its "table-<t>-"):
// item-slots.bin, free-slots.bin, leaves.bin, selectors.bin, column-<c>.bin.
bool KnownTablePartName(std::string_view name) {
  if (name == kLeavesFile || name == kItemSlotsFile || name == kFreeSlotsFile || name == kSelectorsFile) return true;
  constexpr std::string_view prefix = "column-", suffix = ".bin";
  if (!name.starts_with(prefix) || !name.ends_with(suffix) || name.size() < prefix.size() + suffix.size()) {
    return false;
  }
  size_t column = 0;
  return ParseWhole(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()), &column);
}

// state.bin, a step ring's steps.bin, step-info.bin and step-column-<c>.bin
// (any c: a checkpoint of another schema gets the clearer error from its
// state), a table's parts, bare (format 3) or as table-<t>-<part> (format
// 4; any t: a checkpoint of other tables gets the clearer error from its
// state).
bool KnownPartName(std::string_view name) {
  if (name == "state.bin" || name == kStepStateFile || name == kStepInfoFile) return true;
  if (name.starts_with("table-")) {
    const size_t dash = name.find('-', 6);
    size_t table = 0;
    return dash != std::string_view::npos && ParseWhole(name.substr(6, dash - 6), &table) &&
           table < (size_t{1} << 16) && KnownTablePartName(name.substr(dash + 1));
  }
  if (KnownTablePartName(name)) return true;
  constexpr std::string_view suffix = ".bin";
  constexpr std::string_view prefix = "step-column-";
  if (!name.starts_with(prefix) || !name.ends_with(suffix) || name.size() < prefix.size() + suffix.size()) {
    return false;
  }
  size_t column = 0;
  return ParseWhole(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()), &column);
}

// Reads `file` whole if it holds at most `limit` bytes.
Status ReadWhole(FileSystem& file_system, const fs::path& file, uintmax_t limit, std::string* bytes) {
  uint64_t size = 0;
  PERSERVE_RETURN_IF_ERROR(file_system.FileSize(file.string(), &size));
  if (size > limit) {
    return Status::InvalidArgument(fmt::format("{}: {} bytes, more than the {} any such file has (damaged)",
                                               file.string(), size, limit));
  }
  std::unique_ptr<SequentialFile> in;
  PERSERVE_RETURN_IF_ERROR(file_system.NewSequentialFile(file.string(), &in));
  bytes->resize(static_cast<size_t>(size));
  return in->Read(std::as_writable_bytes(std::span(bytes->data(), bytes->size())));
}

Status ParseManifest(const std::string& dir, std::string_view text, int shard, int shards, Manifest* parts,
                     int32_t* format) {
  const std::string file = (fs::path(dir) / kManifest).string();
  size_t line_number = 0;
  auto bad = [&](std::string_view what) {
    return Status::InvalidArgument(fmt::format("{} line {}: {}", file, line_number, what));
  };
  bool ended = false;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    if (newline == std::string_view::npos) return bad("the file ends inside a line (cut short)");
    const std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline + 1);
    ++line_number;
    const std::vector<std::string_view> words = Words(line);
    if (ended) return bad("a line after \"end\"");
    if (line_number == 1) {
      if (words.size() != 2 || words[0] != "perserve-checkpoint" || !ParseWhole(words[1], format)) {
        return Status::InvalidArgument(fmt::format("{}: not a perserve checkpoint manifest", file));
      }
      if (*format < kTransitionFormat || *format > kTablesFormat) {
        return Status::FailedPrecondition(fmt::format("{} has checkpoint format {}; this server reads formats {} to {}",
                                                      dir, *format, kTransitionFormat, kTablesFormat));
      }
    } else if (line_number == 2) {
      int their_shard = -1, their_shards = -1;
      if (words.size() != 4 || words[0] != "shard" || words[2] != "of" || !ParseWhole(words[1], &their_shard) ||
          !ParseWhole(words[3], &their_shards)) {
        return bad("not a \"shard S of K\" line");
      }
      if (their_shards != shards || their_shard != shard) {
        return Status::FailedPrecondition(fmt::format(
            "{} is shard {} of {} server ranks; this is shard {} of {}: restore with the same number of server "
            "ranks",
            dir, their_shard, their_shards, shard, shards));
      }
    } else if (line == "end") {
      ended = true;
    } else {
      ManifestPart part;
      if (words.size() != 4 || words[0] != "part") return bad("not a \"part NAME BYTES HASH\" line");
      if (!KnownPartName(words[1])) return bad(fmt::format("an unknown part \"{}\"", words[1]));
      if (!ParseWhole(words[2], &part.bytes) || part.bytes < 0) {
        return bad(fmt::format("the byte count \"{}\" of {} is not a count", words[2], words[1]));
      }
      if (words[3].size() != 16 || !ParseWhole(words[3], &part.hash, 16)) {
        return bad(fmt::format("the hash \"{}\" of {} is not 16 hex digits", words[3], words[1]));
      }
      if (!parts->emplace(std::string(words[1]), part).second) return bad(fmt::format("{} listed twice", words[1]));
    }
  }
  if (line_number < 2) return Status::InvalidArgument(fmt::format("{}: not a perserve checkpoint manifest", file));
  if (!ended) return Status::InvalidArgument(fmt::format("{} is cut short (no end line)", file));
  return Status::Ok();
}

Status ReadManifest(FileSystem& file_system, const std::string& dir, int shard, int shards, Manifest* parts,
                    int32_t* format) {
  std::string text;
  const fs::path file = fs::path(dir) / kManifest;
  if (!file_system.Exists(file.string())) {
    return Status::NotFound(fmt::format("{} has no {}: not a complete checkpoint", dir, kManifest));
  }
  PERSERVE_RETURN_IF_ERROR(ReadWhole(file_system, file, kMaxManifestBytes, &text));
  return ParseManifest(dir, text, shard, shards, parts, format);
}

// Whether a table is one formats 1 to 3 could hold: the prioritized
// sampler, the oldest-first remover, no max_times_sampled.
bool DefaultSelectors(const replay::ItemTable& table) {
  const replay::ReplayOptions& o = table.items().options();
  return o.sampler == table::SelectorKind::kPrioritized && o.remover == replay::RemoverKind::kOldestFirst &&
         o.max_times_sampled == 0;
}

// Every value of a decoded state.bin, against its range and this server.
// Formats 1 to 3 (table 0's values in the state's own fields) get their one
// table in state->tables; format 4's table 0 is mirrored in those fields.
Status ValidateState(const std::string& dir, CheckpointState* state, const replay::StepReplay& steps, int shard,
                     int shards, int32_t format) {
  const std::string file = (fs::path(dir) / "state.bin").string();
  auto bad = [&](std::string_view field, const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}: {} {} (damaged)", file, field, what));
  };
  if (state->format != format) return bad("format", fmt::format("is {}, the manifest's is {}", state->format, format));
  const replay::Replay& replay = steps.items();
  // What the state names: format 2 the items' stored schema, the others the steps'.
  const Schema& schema = format == kStepFormat ? replay.store().schema() : steps.step_schema();
  const int64_t capacity = steps.options().step_capacity;
  if (format >= kTablesFormat) {
    // As the ring's flags say it (steps.bin, read after the tables).
    for (const auto& [flag, theirs, ours] :
         {std::tuple<std::string_view, std::string, std::string>{"--column", state->schema, schema.ToString()},
          {"--capacity", fmt::format("{}", state->capacity), fmt::format("{}", capacity)}}) {
      if (theirs != ours) {
        return Status::FailedPrecondition(fmt::format(
            "{} was written with {} {}; this server has {} {} (restore with the flags it was written with)", dir,
            flag, theirs, flag, ours));
      }
    }
  }
  if (state->schema != schema.ToString() || state->capacity != capacity) {
    return Status::FailedPrecondition(fmt::format(
        "{} holds a replay of schema {} and capacity {}; this server has schema {} and capacity {} (--column, "
        "--capacity)",
        dir, state->schema, state->capacity, schema.ToString(), capacity));
  }
  if (state->shard != shard || state->shards != shards) {
    return bad("shard", fmt::format("is {} of {}, its manifest's {} of {}", state->shard, state->shards, shard, shards));
  }
  for (size_t i = 0; i < state->episodes.size(); ++i) {
    const replay::EpisodeCarry& e = state->episodes[i];
    if (!std::isfinite(e.return_sum) || !std::isfinite(e.length_sum) || !(e.length_sum >= 0.0) ||
        e.return_done > 1 || e.length_done > 1) {
      return bad("episodes", fmt::format("stream {} carries return {} ({}), length {} ({}): not an episode's", i,
                                         e.return_sum, e.return_done, e.length_sum, e.length_done));
    }
  }
  if (format >= kTablesFormat) {
    PERSERVE_RETURN_IF_ERROR(CheckTables(dir, state->tables, steps));
    for (int t = 0; t < steps.tables(); ++t) {
      const TableCheckpointState& table = state->tables[static_cast<size_t>(t)];
      PERSERVE_RETURN_IF_ERROR(ValidateTableState(file, fmt::format("table {}'s ", table.name), table,
                                                  steps.table(t).items().capacity()));
    }
    const TableCheckpointState& first = state->tables.front();
    state->alpha = steps.items().alpha();  // checked equal: a flag of its table
    state->size = first.size;
    state->replay = first.replay;
    state->limiter = first.limiter;
    return Status::Ok();
  }
  // Formats 1 and 2 kept item k in slot k mod capacity.
  if (format != kOneModelFormat && replay.capacity() < capacity) {
    return Status::FailedPrecondition(fmt::format("{} (format {}) holds up to {} items; this server's table holds "
                                                  "{} (--max-items): restore it with --max-items {} or more",
                                                  dir, format, capacity, replay.capacity(), capacity));
  }
  const double alpha = replay.alpha();
  if (std::memcmp(&state->alpha, &alpha, sizeof(alpha)) != 0) {
    return Status::FailedPrecondition(fmt::format(
        "{} was written with --alpha {}; this server has --alpha {}: its leaves are priority^{}, and a replay "
        "mixing exponents samples by neither (restore with --alpha {})",
        dir, state->alpha, alpha, state->alpha, state->alpha));
  }
  state->tables = {TableCheckpointState{steps.table(0).name(), {}, state->size, state->replay, state->limiter}};
  const int64_t most = format == kOneModelFormat ? replay.capacity() : state->capacity;
  return ValidateTableState(file, "", state->tables.front(), most);
}

// Each leaf a stored item can have: finite, and at least the smallest normal
// double (a priority's leaf is clamped up to it: tree/tree_algorithm.h), or
// (formats 1 and 2, `zero_allowed`) 0: an item evicted, or an add whose
// columns failed, never drawn. The tree refuses the rest (a total past its
// limit) when the leaves go in.
Status ValidateLeaves(const std::string& dir, const std::string& prefix, std::span<const double> leaves,
                      std::span<const uint64_t> keys, bool zero_allowed) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    const double leaf = leaves[i];
    if (std::isfinite(leaf) && ((zero_allowed && leaf == 0.0) || leaf >= std::numeric_limits<double>::min())) {
      continue;
    }
    return Status::InvalidArgument(fmt::format("{}/{}{}: the leaf of key {} is {}: no stored item's (damaged)", dir,
                                               prefix, kLeavesFile, keys[i], leaf));
  }
  return Status::Ok();
}

// A checkpoint is complete once renamed, durable once its directory is
// synced after: a writer that died between the two left it complete but
// not durable, and a crash of the machine could bring back an older one
// after this server had served what it restored. So the restore syncs the
// directory first. (Where it cannot, a read-only copy say, it says so and
// goes on: nothing is written there that a crash could undo.)
void MakeDurable(FileSystem& file_system, const std::string& checkpoint) {
  const fs::path parent = fs::path(checkpoint).parent_path();
  const Status synced = file_system.SyncDirectory(parent.empty() ? "." : parent.string());
  if (!synced.ok()) {
    spdlog::warn("restore: {} (so a crash of the machine could still lose {}: it is restored all the same)",
                 synced.ToString(), checkpoint);
  }
}

// Where to restore from: `path` itself when it is a checkpoint, else the
// newest complete checkpoint of this shard under `path` (a --checkpoint-dir),
// made durable (MakeDurable).
Status ResolveCheckpoint(FileSystem& file_system, const std::string& path, int shard, int shards,
                         std::string* dir) {
  if (file_system.Exists((fs::path(path) / kManifest).string())) {
    *dir = path;
    MakeDurable(file_system, *dir);
    return Status::Ok();
  }
  if (path.ends_with(kPartialSuffix) || fs::path(path).filename().string().ends_with(kPartialSuffix)) {
    return Status::FailedPrecondition(fmt::format(
        "{} is a partial checkpoint: its writing was cut short (the job ended before it was complete), and it "
        "cannot be restored",
        path));
  }
  const std::string shard_dir = ShardDirectory(path, shard, shards);
  *dir = NewestComplete(file_system, shard_dir);
  if (!dir->empty()) {
    MakeDurable(file_system, *dir);
    return Status::Ok();
  }
  std::vector<std::string> names, partial, others;
  (void)file_system.ListDirectory(shard_dir, &names);  // none: no such directory
  for (const std::string& name : names) {
    if (name.ends_with(kPartialSuffix)) partial.push_back(name);
  }
  if (!partial.empty()) {
    std::sort(partial.begin(), partial.end());
    return Status::FailedPrecondition(fmt::format(
        "{} holds only a partial checkpoint ({}): its writing was cut short (the job ended before it was "
        "complete) and no complete checkpoint was written before it; there is nothing to restore",
        shard_dir, fmt::join(partial, ", ")));
  }
  // Shards of a job of another number of server ranks. (This job's own
  // shard directories, empty, say only that no checkpoint was completed.)
  (void)file_system.ListDirectory(path, &names);
  const std::string this_job = fmt::format("-of-{}", shards);
  for (const std::string& name : names) {
    if (name.starts_with("shard-") && !name.ends_with(this_job)) others.push_back(name);
  }
  if (!others.empty()) {
    std::sort(others.begin(), others.end());
    return Status::FailedPrecondition(fmt::format(
        "{} holds no checkpoint for shard {} of {} server ranks (it has {}): restore with the same number of "
        "server ranks",
        path, shard, shards, fmt::join(others, ", ")));
  }
  return Status::NotFound(fmt::format("no complete checkpoint in {}", path));
}

// The items a checkpoint holds of one table, read in chunks: each part's
// size checked first, its hash as it is read (the replay is used only if
// every hash matches). Formats 1 and 2 list the keys oldest..next-1 (slot:
// key mod capacity), formats 3 and 4 each item's key and slot.
class ItemParts {
 public:
  // `prefix`: the table's parts' (format 4: "table-<t>-"); `capacity`: the
  // state's (formats 1 and 2: their slots); `key_span`: how far below the
  // next key a held item's key may be (formats 3 and 4).
  ItemParts(FileSystem& file_system, std::string dir, const Manifest& parts, std::string prefix, const Schema& schema,
            const TableCheckpointState& table, int64_t capacity, int32_t format, uint64_t key_span)
      : file_system_(file_system),
        dir_(std::move(dir)),
        parts_(parts),
        prefix_(std::move(prefix)),
        schema_(schema),
        table_(table),
        capacity_(capacity),
        format_(format),
        key_span_(key_span) {}

  Status Open() {
    const size_t columns = schema_.columns.size();
    for (size_t c = 0; c < columns; ++c) {
      PERSERVE_RETURN_IF_ERROR(Add(prefix_ + ColumnFile(c), table_.size * schema_.columns[c].ItemBytes()));
    }
    PERSERVE_RETURN_IF_ERROR(Add(prefix_ + kLeavesFile, table_.size * static_cast<int64_t>(sizeof(double))));
    if (format_ >= kOneModelFormat) PERSERVE_RETURN_IF_ERROR(Add(prefix_ + kItemSlotsFile, table_.size * 16));
    return Status::Ok();
  }

  // The next `rows` items: their keys, slots, leaves and rows (column after column).
  Status Read(int64_t first, int64_t rows, std::vector<uint64_t>* keys, std::vector<int64_t>* slots,
              std::vector<double>* leaves, std::vector<std::byte>* chunk) {
    chunk->resize(static_cast<size_t>(rows * schema_.ItemBytes()));
    std::byte* out = chunk->data();
    const size_t columns = schema_.columns.size();
    for (size_t c = 0; c < columns; ++c) {
      const int64_t length = rows * schema_.columns[c].ItemBytes();
      PERSERVE_RETURN_IF_ERROR(ReadInto(c, std::span(out, static_cast<size_t>(length))));
      out += length;
    }
    leaves->resize(static_cast<size_t>(rows));
    PERSERVE_RETURN_IF_ERROR(ReadInto(columns, std::as_writable_bytes(std::span(*leaves))));
    keys->resize(static_cast<size_t>(rows));
    slots->resize(static_cast<size_t>(rows));
    if (format_ >= kOneModelFormat) {
      std::vector<int64_t> records(static_cast<size_t>(2 * rows));
      PERSERVE_RETURN_IF_ERROR(ReadInto(columns + 1, std::as_writable_bytes(std::span(records))));
      const uint64_t next = table_.replay.next_key;
      for (int64_t i = 0; i < rows; ++i) {
        (*keys)[i] = static_cast<uint64_t>(records[2 * i]);
        (*slots)[i] = records[2 * i + 1];
        // A table holds keys issued since its oldest item's steps were held:
        // fewer than two rings of steps (the table's KeyIndex sizes itself
        // by their span).
        if ((*keys)[i] >= next || next - (*keys)[i] > key_span_) {
          return Status::InvalidArgument(fmt::format(
              "{}/{}: key {} is not one a table of this ring can hold: its keys are below the next key {} and at "
              "most {} below it (damaged)",
              dir_, prefix_ + kItemSlotsFile, (*keys)[i], next, key_span_));
        }
      }
      PERSERVE_RETURN_IF_ERROR(ValidateLeaves(dir_, prefix_, *leaves, *keys, /*zero_allowed=*/false));
      for (const double leaf : *leaves) total_ += leaf;
      if (total_ > tree::kMaxTreeTotal) {
        return Status::InvalidArgument(fmt::format("{}/{}{}: the leaves sum to {} or more, past the {} a tree keeps "
                                                   "(damaged)",
                                                   dir_, prefix_, kLeavesFile, total_, tree::kMaxTreeTotal));
      }
      return Status::Ok();
    }
    const uint64_t oldest = table_.replay.next_key - static_cast<uint64_t>(table_.size);
    for (int64_t i = 0; i < rows; ++i) {
      (*keys)[i] = oldest + static_cast<uint64_t>(first + i);
      (*slots)[i] = static_cast<int64_t>((*keys)[i] % static_cast<uint64_t>(capacity_));
    }
    return ValidateLeaves(dir_, prefix_, *leaves, *keys, /*zero_allowed=*/true);
  }

  Status Close() {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (hashes_[i].Finish() != expected_[i]) return HashMismatch(dir_, names_[i]);
    }
    return Status::Ok();
  }

 private:
  Status Add(const std::string& name, int64_t bytes) {
    ManifestPart part;
    PERSERVE_RETURN_IF_ERROR(FindPart(file_system_, dir_, name, parts_, bytes, &part));
    names_.push_back(name);
    expected_.push_back(part.hash);
    hashes_.emplace_back();
    files_.emplace_back();
    return file_system_.NewSequentialFile(fmt::format("{}/{}", dir_, name), &files_.back());
  }
  Status ReadInto(size_t part, std::span<std::byte> out) {
    PERSERVE_RETURN_IF_ERROR(files_[part]->Read(out));
    hashes_[part].Update(out);
    return Status::Ok();
  }

  FileSystem& file_system_;
  std::string dir_;
  const Manifest& parts_;
  std::string prefix_;
  const Schema& schema_;
  const TableCheckpointState& table_;
  int64_t capacity_;
  int32_t format_;
  uint64_t key_span_;
  std::vector<std::string> names_;
  std::vector<uint64_t> expected_;
  std::vector<Hash64> hashes_;
  std::vector<std::unique_ptr<SequentialFile>> files_;
  double total_ = 0.0;  // of the leaves read so far
};

// Restores table `t`'s items, state, free slots and (format 4) selectors
// from its parts (`prefix`: format 4's "table-<t>-", else none). A format 1
// checkpoint's items are its steps too: they go into the ring here.
Status RestoreTable(FileSystem& file_system, const std::string& dir, const Manifest& parts, int32_t format, int t,
                    const std::string& prefix, const CheckpointState& state, replay::StepReplay* steps) {
  const TableCheckpointState& saved = state.tables[static_cast<size_t>(t)];
  replay::Replay& items = steps->mutable_table(t).mutable_items();
  const Schema& schema = format == kTransitionFormat ? steps->step_schema() : items.store().schema();
  // A table holds keys issued since its oldest item's steps were held: fewer
  // than two rings of steps (the table's KeyIndex sizes itself by their
  // span), unless items leave otherwise than with their steps and the oldest
  // first (max_times_sampled, the lowest-priority remover): then a step may
  // get one item after another while an older one stays.
  const replay::ReplayOptions& options = items.options();
  const uint64_t key_span = options.max_times_sampled == 0 && options.remover == replay::RemoverKind::kOldestFirst
                                ? 2 * static_cast<uint64_t>(steps->options().step_capacity)
                                : saved.replay.next_key;
  ItemParts reader(file_system, dir, parts, prefix, schema, saved, state.capacity, format, key_span);
  PERSERVE_RETURN_IF_ERROR(reader.Open());
  const int64_t rows_per_chunk = RowsPerSlice(schema);
  std::vector<uint64_t> keys;
  std::vector<int64_t> slots;
  std::vector<double> leaves;
  std::vector<std::byte> chunk;
  for (int64_t row = 0; row < saved.size; row += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, saved.size - row);
    PERSERVE_RETURN_IF_ERROR(reader.Read(row, rows, &keys, &slots, &leaves, &chunk));
    std::span<const std::byte> stored = chunk;
    if (format == kTransitionFormat) {
      const Status restored = steps->RestoreSteps(0, rows, chunk);
      if (!restored.ok()) {
        return Status::InvalidArgument(fmt::format("{}/{}: {} (damaged)", dir, ColumnFile(0), restored.message()));
      }
      stored = std::as_bytes(std::span(keys));  // a transition's row in the table: its step's key, its own
    }
    // Formats 1 and 2 held evicted items too (leaf 0): they are gone.
    if (format < kOneModelFormat) {
      std::vector<uint64_t> live_keys;
      std::vector<int64_t> live_slots;
      std::vector<double> live_leaves;
      std::vector<std::byte> live_rows;
      for (int64_t i = 0; i < rows; ++i) {
        if (leaves[i] == 0.0) continue;
        live_keys.push_back(keys[i]);
        live_slots.push_back(slots[i]);
        live_leaves.push_back(leaves[i]);
      }
      // Rows are column after column: gather the live items' rows of each.
      int64_t offset = 0;
      for (const Column& column : items.store().schema().columns) {
        const int64_t bytes = column.ItemBytes();
        for (int64_t i = 0; i < rows; ++i) {
          if (leaves[i] == 0.0) continue;
          const std::byte* from = stored.data() + offset + i * bytes;
          live_rows.insert(live_rows.end(), from, from + bytes);
        }
        offset += rows * bytes;
      }
      const Status restored = items.RestoreItems(live_keys, live_slots, live_rows, live_leaves);
      if (!restored.ok()) {
        return Status::InvalidArgument(fmt::format("{}/leaves.bin: {} (damaged)", dir, restored.message()));
      }
      continue;
    }
    const Status restored = items.RestoreItems(keys, slots, stored, leaves);
    if (!restored.ok()) {
      return Status::InvalidArgument(
          fmt::format("{}/{}{}: {} (damaged)", dir, prefix, kItemSlotsFile, restored.message()));
    }
  }
  PERSERVE_RETURN_IF_ERROR(reader.Close());
  const Status state_restored = items.RestoreState(saved.replay);
  if (!state_restored.ok()) {
    return Status::InvalidArgument(fmt::format("{}/state.bin: {}{} (damaged)", dir,
                                               prefix.empty() ? "" : fmt::format("table {}: ", saved.name),
                                               state_restored.message()));
  }
  if (format < kOneModelFormat) return Status::Ok();
  // The slots ever used, then the free ones: new items take the slots they would have.
  const std::string free_file = prefix + kFreeSlotsFile;
  const int64_t limit = (items.capacity() + 1) * static_cast<int64_t>(sizeof(int64_t));
  std::string bytes;
  PERSERVE_RETURN_IF_ERROR(ReadPart(file_system, dir, free_file, parts, -1, limit, &bytes));
  if (bytes.empty() || bytes.size() % sizeof(int64_t) != 0) {
    return Status::InvalidArgument(
        fmt::format("{}/{}: {} bytes, not whole slots (damaged)", dir, free_file, bytes.size()));
  }
  std::vector<int64_t> free_slots(bytes.size() / sizeof(int64_t));
  std::memcpy(free_slots.data(), bytes.data(), bytes.size());
  const Status free = items.RestoreFreeSlots(free_slots[0], std::span(free_slots).subspan(1));
  if (!free.ok()) return Status::InvalidArgument(fmt::format("{}/{}: {} (damaged)", dir, free_file, free.message()));
  if (format < kTablesFormat) return Status::Ok();
  // Last, the selectors (Replay::RestoreSelectors): a key, priority and
  // count an item, and two orders of the keys, 40 bytes an item at most.
  const std::string selectors_file = prefix + kSelectorsFile;
  replay::SelectorState selectors;
  PERSERVE_RETURN_IF_ERROR(
      ReadEncodedPart(file_system, dir, selectors_file, parts, 40 * (items.capacity() + 1) + 64, &selectors));
  const Status rebuilt = items.RestoreSelectors(selectors);
  if (!rebuilt.ok()) {
    return Status::InvalidArgument(fmt::format("{}/{}: {} (damaged)", dir, selectors_file, rebuilt.message()));
  }
  return Status::Ok();
}

Status LoadCheckpointUnguarded(FileSystem& file_system, const std::string& path, int shard, int shards,
                               replay::StepReplay* steps, CheckpointState* state, std::string* loaded) {
  std::string dir;
  PERSERVE_RETURN_IF_ERROR(ResolveCheckpoint(file_system, path, shard, shards, &dir));
  Manifest parts;
  int32_t format = 0;
  PERSERVE_RETURN_IF_ERROR(ReadManifest(file_system, dir, shard, shards, &parts, &format));
  const bool transitions = steps->RowsAreSteps();
  if ((format == kTransitionFormat && !transitions) || (format == kStepFormat && transitions)) {
    return Status::FailedPrecondition(fmt::format(
        "{} holds a replay of {}; this server stores {} (--n-step or --sequence-length: restore with the flags it "
        "was written with)",
        dir, format == kStepFormat ? "step streams" : "transitions", transitions ? "transitions" : "step streams"));
  }
  // Formats 1 to 3 hold one table of the default selectors.
  if (format < kTablesFormat && (steps->tables() != 1 || !DefaultSelectors(steps->table(0)))) {
    return Status::FailedPrecondition(fmt::format(
        "{} (format {}) holds one table, of the prioritized sampler, the fifo remover and no max_times_sampled; this "
        "server has {} table(s) ({}): restore it into a server of that one table",
        dir, format, steps->tables(), steps->TableNames()));
  }
  // The flags first, so that an error names the flag: format 4's tables,
  // then the ring's (formats 2 and 3 list table 0's layout with the ring's).
  const auto read_state = [&] {
    PERSERVE_RETURN_IF_ERROR(ReadEncodedPart(file_system, dir, "state.bin", parts, kMaxStateBytes, state));
    return ValidateState(dir, state, *steps, shard, shards, format);
  };
  if (format >= kTablesFormat) PERSERVE_RETURN_IF_ERROR(read_state());
  StepCheckpointState step_state;
  if (format != kTransitionFormat) {
    PERSERVE_RETURN_IF_ERROR(ReadStepState(file_system, dir, parts, *steps, format, &step_state));
  }
  if (format < kTablesFormat) PERSERVE_RETURN_IF_ERROR(read_state());

  // The steps first: a format 1 checkpoint's transitions are its steps (of
  // stream 0, which appended every key: one long episode, as transitions
  // are; RestoreTable puts them in), the others keep their ring.
  if (format == kTransitionFormat) {
    const uint64_t oldest = state->replay.next_key - static_cast<uint64_t>(state->size);
    const std::vector<int64_t> first_index{static_cast<int64_t>(oldest)}, episode_start{0};
    PERSERVE_RETURN_IF_ERROR(steps->StartRestore(oldest, first_index, episode_start));
  } else {
    PERSERVE_RETURN_IF_ERROR(LoadStepRing(file_system, dir, parts, step_state, steps));
  }
  // Then each table's items.
  for (int t = 0; t < static_cast<int>(state->tables.size()); ++t) {
    PERSERVE_RETURN_IF_ERROR(RestoreTable(file_system, dir, parts, format, t,
                                          format >= kTablesFormat ? TablePart(t, "") : "", *state, steps));
  }
  // Every item must be one an append would create now over the held steps.
  int failed = 0;
  const Status linked = steps->RestoreItems(&failed);
  if (!linked.ok()) {
    const std::string columns = format >= kTablesFormat ? TablePart(failed, ColumnFile(0)) : ColumnFile(0);
    return Status::InvalidArgument(fmt::format("{}/{}: {} (damaged)", dir, columns, linked.message()));
  }
  steps->EndRestore();
  *loaded = dir;
  return Status::Ok();
}

}  // namespace

namespace checkpoint_layout {

Status FindPart(FileSystem& file_system, const std::string& dir, const std::string& name, const Manifest& parts,
                int64_t expected, ManifestPart* part) {
  const auto found = parts.find(name);
  if (found == parts.end()) return Status::InvalidArgument(fmt::format("{}/{}: the manifest lists no {}", dir, kManifest, name));
  const fs::path file = fs::path(dir) / name;
  uint64_t size = 0;
  const bool error = !file_system.FileSize(file.string(), &size).ok();
  if (error || static_cast<int64_t>(size) != found->second.bytes ||
      (expected >= 0 && found->second.bytes != expected)) {
    return Status::InvalidArgument(
        fmt::format("{}: {} bytes, the manifest says {}{} (truncated or damaged)", file.string(), error ? 0 : size,
                    found->second.bytes, expected >= 0 ? fmt::format(" and its items need {}", expected) : ""));
  }
  *part = found->second;
  return Status::Ok();
}

Status HashMismatch(const std::string& dir, const std::string& name) {
  return Status::InvalidArgument(fmt::format("{}/{}: its hash does not match the manifest (damaged)", dir, name));
}

Status ReadPart(FileSystem& file_system, const std::string& dir, const std::string& name, const Manifest& parts,
                int64_t expected, int64_t limit, std::string* bytes) {
  ManifestPart part;
  PERSERVE_RETURN_IF_ERROR(FindPart(file_system, dir, name, parts, expected, &part));
  PERSERVE_RETURN_IF_ERROR(ReadWhole(file_system, fs::path(dir) / name, static_cast<uintmax_t>(limit), bytes));
  Hash64 hash;
  hash.Update(std::as_bytes(std::span(bytes->data(), bytes->size())));
  if (hash.Finish() != part.hash) return HashMismatch(dir, name);
  return Status::Ok();
}

}  // namespace checkpoint_layout

Status LoadCheckpoint(const std::string& path, int shard, int shards, replay::StepReplay* replay,
                      CheckpointState* state, std::string* loaded, FileSystem* file_system) {
  try {
    return LoadCheckpointUnguarded(*file_system, path, shard, shards, replay, state, loaded);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(fmt::format("out of memory restoring {}", path));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("restoring {} failed: {}", path, e.what()));
  }
}

}  // namespace perserve::service
