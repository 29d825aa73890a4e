// The on-disk layout a checkpoint's writer (checkpoint.cc) and its restore
// (checkpoint_restore.cc) share: file names, numbering, slices. checkpoint.h
// describes the layout itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "perserve/schema.h"

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
std::string NewestComplete(const std::string& shard_dir);

// Rows of `schema` in about kSliceBytes (at least one): what a slice writes
// and a restore reads at a time.
int64_t RowsPerSlice(const Schema& schema);

}  // namespace perserve::service::checkpoint_layout
