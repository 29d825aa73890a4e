// How fuzz_service and fuzz_join read their inputs (fuzz_frame's input is
// one frame, as it arrives), shared with write_seeds so the seed corpus is
// real traffic in the targets' own layouts.
//
// fuzz_service: a sequence of records, each
//
//   offset  size  field
//        0     1  control: bit 0 the client (0 or 1); bit 1 the frame comes
//                 with the reply tag instead of the request tag; bit 2 the
//                 client reads its replies first; bit 3 one Step() follows
//        1     2  n, the frame's length (little-endian)
//        3     n  the frame (shorter if the input ends first)
//
// fuzz_join: one peer's join data
//
//   offset  size  field
//        0     4  rank             int32
//        4     4  role             int32 (proto::Role)
//        8     4  protocol version int32
//       12     8  schema length    uint64, as broadcast before the schema
//       20     8  alpha            double, as a server broadcasts it
//       28     8  capacity         double, likewise
//       36     4  server count     uint32, the servers in the role table
//       40     .  schema bytes     what the server rank broadcasts
//
// fuzz_checkpoint: a checkpoint directory's files
//
//   offset  size  field
//        0     1  control: bit 0 set: the MANIFEST is the input's own; clear:
//                 one is written listing each part the input gives with its
//                 true size and hash, so the state's and leaves' checks past
//                 the hashes are reached too; bit 1 set: restored into the
//                 n-step table (fuzz/step_replay_fixture.h), clear: into the
//                 table of transitions; bit 2 set: the written MANIFEST says
//                 the format written before the one item model (1 for
//                 transitions, 2 for n-step), clear: format 4
//        1     .  records, each: 1 byte part (mod kCheckpointParts: MANIFEST,
//                 state.bin, leaves.bin, column-0.bin, column-1.bin, then a
//                 step ring's steps.bin, step-info.bin, step-column-0..2.bin,
//                 then item-slots.bin, free-slots.bin, selectors.bin; a
//                 table's part is written as table 0's, table-0-<name>,
//                 unless the legacy bit is set: CheckpointPartName), 4 bytes
//                 n (little-endian), n bytes (fewer if the input ends
//                 first); a later record of the same part replaces an
//                 earlier one
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "perserve/schema.h"

namespace perserve::fuzz {

inline constexpr int kServiceClients = 2;

// The schema of fuzz_service's replay (and of the seeds' add requests):
// 10 bytes an item.
inline Schema ServiceSchema() { return Schema{{{"id", DType::kInt64, {}}, {"tag", DType::kUInt8, {2}}}}; }
// The step schema of fuzz_step_service's step streams (2-step transitions,
// obs stacked 2 deep): 7 bytes a step.
inline Schema StepServiceSchema() {
  return Schema{{{"obs", DType::kUInt8, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
}

struct ServiceRecord {
  int client = 0;
  bool reply_tag = false;
  bool columns_tag = false;  // an add's columns apart (proto::kAddColumnsTag): raw bytes, no frame
  bool read_replies_first = false;
  bool step_after = false;
  std::span<const std::byte> frame;
};

inline constexpr uint8_t kClientBit = 1, kReplyTagBit = 2, kReadRepliesBit = 4, kStepBit = 8, kColumnsTagBit = 16;

// Splits `input` into records; a record cut short takes what is left.
inline std::vector<ServiceRecord> ParseServiceInput(std::span<const std::byte> input) {
  std::vector<ServiceRecord> records;
  while (input.size() >= 3) {
    const auto control = static_cast<uint8_t>(input[0]);
    const size_t length = static_cast<size_t>(input[1]) | static_cast<size_t>(input[2]) << 8;
    input = input.subspan(3);
    const size_t taken = std::min(length, input.size());
    records.push_back({control & kClientBit, (control & kReplyTagBit) != 0, (control & kColumnsTagBit) != 0,
                       (control & kReadRepliesBit) != 0, (control & kStepBit) != 0, input.first(taken)});
    input = input.subspan(taken);
  }
  return records;
}

// Appends one record (frames up to 65535 bytes).
inline void AppendServiceRecord(uint8_t control, std::span<const std::byte> frame, std::vector<std::byte>* input) {
  const size_t length = std::min<size_t>(frame.size(), 0xffff);
  input->push_back(static_cast<std::byte>(control));
  input->push_back(static_cast<std::byte>(length & 0xff));
  input->push_back(static_cast<std::byte>(length >> 8));
  input->insert(input->end(), frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(length));
}

struct JoinInput {
  int32_t rank = 0;
  int32_t role = 0;
  int32_t version = 0;
  uint64_t schema_length = 0;
  double alpha = 0.0;
  double capacity = 0.0;
  uint32_t servers = 0;
  std::span<const std::byte> schema;
};

inline constexpr size_t kJoinFixedBytes = 40;

// False when `input` is shorter than the fixed fields.
inline bool ParseJoinInput(std::span<const std::byte> input, JoinInput* join) {
  if (input.size() < kJoinFixedBytes) return false;
  std::memcpy(&join->rank, input.data(), 4);
  std::memcpy(&join->role, input.data() + 4, 4);
  std::memcpy(&join->version, input.data() + 8, 4);
  std::memcpy(&join->schema_length, input.data() + 12, 8);
  std::memcpy(&join->alpha, input.data() + 20, 8);
  std::memcpy(&join->capacity, input.data() + 28, 8);
  std::memcpy(&join->servers, input.data() + 36, 4);
  join->schema = input.subspan(kJoinFixedBytes);
  return true;
}

inline std::vector<std::byte> EncodeJoinInput(const JoinInput& join) {
  std::vector<std::byte> input(kJoinFixedBytes);
  std::memcpy(input.data(), &join.rank, 4);
  std::memcpy(input.data() + 4, &join.role, 4);
  std::memcpy(input.data() + 8, &join.version, 4);
  std::memcpy(input.data() + 12, &join.schema_length, 8);
  std::memcpy(input.data() + 20, &join.alpha, 8);
  std::memcpy(input.data() + 28, &join.capacity, 8);
  std::memcpy(input.data() + 36, &join.servers, 4);
  input.insert(input.end(), join.schema.begin(), join.schema.end());
  return input;
}

inline constexpr const char* kCheckpointParts[] = {
    "MANIFEST",      "state.bin",         "leaves.bin",        "column-0.bin",      "column-1.bin",
    "steps.bin",     "step-info.bin",     "step-column-0.bin", "step-column-1.bin", "step-column-2.bin",
    "item-slots.bin", "free-slots.bin",   "selectors.bin"};

// Part `part`'s file name: a table's part (leaves, columns, item slots, free
// slots, selectors) as table 0's in format 4 (table-0-<name>), bare in the
// legacy formats.
inline std::string CheckpointPartName(size_t part, bool legacy) {
  const std::string name = kCheckpointParts[part];
  const bool table_part = part == 2 || part == 3 || part == 4 || part >= 10;
  return table_part && !legacy ? "table-0-" + name : name;
}
inline constexpr uint8_t kOwnManifestBit = 1, kStepsBit = 2, kLegacyBit = 4;

struct CheckpointInput {
  bool own_manifest = false;
  bool steps = false;   // restored into the n-step table (fuzz/step_replay_fixture.h), else into transitions
  bool legacy = false;  // the written MANIFEST says format 1 or 2
  // By part index (kCheckpointParts); absent parts are not written.
  std::vector<std::span<const std::byte>> parts = std::vector<std::span<const std::byte>>(std::size(kCheckpointParts));
  std::vector<bool> present = std::vector<bool>(std::size(kCheckpointParts), false);
};

inline CheckpointInput ParseCheckpointInput(std::span<const std::byte> input) {
  CheckpointInput parsed;
  if (input.empty()) return parsed;
  parsed.own_manifest = (static_cast<uint8_t>(input[0]) & kOwnManifestBit) != 0;
  parsed.steps = (static_cast<uint8_t>(input[0]) & kStepsBit) != 0;
  parsed.legacy = (static_cast<uint8_t>(input[0]) & kLegacyBit) != 0;
  input = input.subspan(1);
  while (input.size() >= 5) {
    const size_t part = static_cast<uint8_t>(input[0]) % std::size(kCheckpointParts);
    uint32_t length = 0;
    std::memcpy(&length, input.data() + 1, 4);
    input = input.subspan(5);
    const size_t taken = std::min<size_t>(length, input.size());
    parsed.parts[part] = input.first(taken);
    parsed.present[part] = true;
    input = input.subspan(taken);
  }
  return parsed;
}

inline void AppendCheckpointRecord(uint8_t part, std::span<const std::byte> bytes, std::vector<std::byte>* input) {
  const auto length = static_cast<uint32_t>(bytes.size());
  input->push_back(static_cast<std::byte>(part));
  const auto* length_bytes = reinterpret_cast<const std::byte*>(&length);
  input->insert(input->end(), length_bytes, length_bytes + 4);
  input->insert(input->end(), bytes.begin(), bytes.end());
}

}  // namespace perserve::fuzz
