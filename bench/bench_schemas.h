// The transitions the benchmarks move: ~128 B CartPole-like ones ("small")
// or Atari-like ones ("atari": two 84x84x4 uint8 frames).
#pragma once

#include <string>

#include "perserve/schema.h"

namespace perserve::bench {

inline Schema SchemaFor(const std::string& size) {
  if (size == "atari") {
    return Schema{{{"obs", DType::kUInt8, {84, 84, 4}}, {"next_obs", DType::kUInt8, {84, 84, 4}},
                   {"action", DType::kInt64, {}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
  }
  return Schema{{{"obs", DType::kFloat32, {14}}, {"next_obs", DType::kFloat32, {14}}, {"action", DType::kInt64, {}},
                 {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
}

}  // namespace perserve::bench
