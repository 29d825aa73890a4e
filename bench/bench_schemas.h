// The transitions the benchmarks move: ~128 B CartPole-like ones ("small"),
// Atari-like ones ("atari": two 84x84x4 uint8 frames), and between them
// vector observations of about 1, 4 and 16 KB per transition ("1k", "4k",
// "16k": two float32 vectors of 128, 512, 2048), where copying and sending
// rows in place cross over. And the steps of step streams (docs/steps.md).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "perserve/schema.h"

namespace perserve::bench {

inline Schema SchemaFor(const std::string& size) {
  if (size == "atari") {
    return Schema{{{"obs", DType::kUInt8, {84, 84, 4}}, {"next_obs", DType::kUInt8, {84, 84, 4}},
                   {"action", DType::kInt64, {}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
  }
  if (size == "1k" || size == "4k" || size == "16k") {
    const int64_t floats = size == "1k" ? 128 : size == "4k" ? 512 : 2048;
    return Schema{{{"obs", DType::kFloat32, {floats}}, {"next_obs", DType::kFloat32, {floats}},
                   {"action", DType::kInt64, {}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
  }
  return Schema{{{"obs", DType::kFloat32, {14}}, {"next_obs", DType::kFloat32, {14}}, {"action", DType::kInt64, {}},
                 {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
}

// The sizes SchemaFor knows, for a command line's check.
inline const std::vector<std::string>& SchemaSizes() {
  static const std::vector<std::string> sizes{"small", "1k", "4k", "16k", "atari"};
  return sizes;
}

// One Atari step of a step stream (docs/steps.md): an 84x84 frame, an int32
// action, a float32 reward, a uint8 done; 7,065 bytes, Dopamine's row.
inline Schema AtariStepSchema() {
  return Schema{{{"obs", DType::kUInt8, {84, 84}},
                 {"action", DType::kInt32, {}},
                 {"reward", DType::kFloat32, {}},
                 {"done", DType::kUInt8, {}}}};
}

// The step-stream workloads perserve_bench_system knows, over AtariStepSchema
// steps: Ape-X's n-step transitions ("atari-steps") and R2D2's sequences
// ("atari-sequences"); the system benchmark says what each sends.
// A benchmark's JSON line to stdout, and to `out` when given.
inline void PrintJson(const std::string& json, const std::string& out) {
  std::fputs(json.c_str(), stdout);
  if (out.empty()) return;
  if (std::FILE* file = std::fopen(out.c_str(), "w"); file != nullptr) {
    std::fputs(json.c_str(), file);
    std::fclose(file);
  }
}

inline const std::vector<std::string>& StepSizes() {
  static const std::vector<std::string> sizes{"atari-steps", "atari-sequences"};
  return sizes;
}

}  // namespace perserve::bench
