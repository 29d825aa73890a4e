// The on-disk layout a checkpoint's writer (checkpoint.cc) and its restore
// (checkpoint_restore.cc) share: file names, numbering, slices. checkpoint.h
// describes the layout itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "proto/bounded_input_archive.h"
#include "service/checkpoint/file_system.h"

namespace perserve::service::checkpoint_layout {

inline constexpr const char* kManifest = "MANIFEST";
inline constexpr const char* kPartialSuffix = ".partial";
inline constexpr int64_t kSliceBytes = int64_t{1} << 20;  // bytes a slice writes (over every column), about

// checkpoint-000012 -> 12; -1 for anything else (a .partial included).
int64_t CheckpointNumber(const std::string& name);

// "column-<c>.bin".
std::string ColumnFile(size_t column);

// The newest complete checkpoint (it has its MANIFEST) in a shard's
// directory; "" when there is none (or no such directory).
std::string NewestComplete(FileSystem& file_system, const std::string& shard_dir);

// Rows of `schema` in about kSliceBytes (at least one): what a slice writes
// and a restore reads at a time.
int64_t RowsPerSlice(const Schema& schema);

// A checkpoint's formats (the MANIFEST's first line, state.bin's first
// field): 4 every table's (checkpoint.h); written before it, 3 the one
// item model's of table 0 alone, 1 a replay of transitions (their keys
// oldest..next-1 in slots key mod capacity) and 2 one of step streams (its
// items' replay as format 1 holds it, and the step ring's parts:
// step_checkpoint.h). Formats 1 to 3 are still restored, into table 0 of a
// server of one table.
inline constexpr int32_t kTransitionFormat = 1;
inline constexpr int32_t kStepFormat = 2;
inline constexpr int32_t kOneModelFormat = 3;
inline constexpr int32_t kTablesFormat = 4;
// A table's parts: format 3 names them so for its one table; format 4
// prefixes each with its table (TablePart).
inline constexpr const char* kItemSlotsFile = "item-slots.bin";
inline constexpr const char* kFreeSlotsFile = "free-slots.bin";
inline constexpr const char* kLeavesFile = "leaves.bin";
inline constexpr const char* kSelectorsFile = "selectors.bin";  // format 4 only

// Table `table`'s part `name` in format 4: "table-<t>-<name>".
std::string TablePart(int table, std::string_view name);

// Restoring: a MANIFEST's part lines, by name.
struct ManifestPart {
  int64_t bytes = 0;
  uint64_t hash = 0;
};
using Manifest = std::map<std::string, ManifestPart, std::less<>>;

// A part's manifest line, its file's size checked against it and, when
// `expected` >= 0, against the bytes it must have.
Status FindPart(FileSystem& file_system, const std::string& dir, const std::string& name, const Manifest& parts,
                int64_t expected, ManifestPart* part);
// Reads a part whole (of the size `expected`, when >= 0; at most `limit`)
// and checks its hash.
Status ReadPart(FileSystem& file_system, const std::string& dir, const std::string& name, const Manifest& parts,
                int64_t expected, int64_t limit, std::string* bytes);
Status HashMismatch(const std::string& dir, const std::string& name);

// Reads a cereal-encoded part (at most `limit` bytes; ReadPart) and decodes
// it into *value, every byte of it: InvalidArgument naming the file when it
// does not decode or has bytes past its end.
template <class T>
Status ReadEncodedPart(FileSystem& file_system, const std::string& dir, const std::string& name, const Manifest& parts,
                       int64_t limit, T* value) {
  std::string bytes;
  PERSERVE_RETURN_IF_ERROR(ReadPart(file_system, dir, name, parts, -1, limit, &bytes));
  try {
    proto::BoundedInputArchive archive(std::as_bytes(std::span(bytes.data(), bytes.size())));
    archive(*value);
    if (archive.bytes_left() > 0) {
      return Status::InvalidArgument(
          fmt::format("{}/{}: {} bytes past the state's end (damaged)", dir, name, archive.bytes_left()));
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(fmt::format("{}/{} does not decode: {}", dir, name, e.what()));
  }
  return Status::Ok();
}

}  // namespace perserve::service::checkpoint_layout
