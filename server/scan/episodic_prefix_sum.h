// EpisodicPrefixSum: running sums that reset at episode boundaries, batched
// over independent streams (one per actor or environment), with a carry so
// that one episode can span many calls.
//
// Arrays are [streams, length] row-major; carry_sum and carry_done are
// [streams], read (the state before this call: the running sum and the last
// done flag) and written (the state after it). Scanning a sequence in chunks,
// passing the carry along, gives exactly what scanning it whole gives on the
// CPU. A fresh stream starts with carry {0, 0}.
//
// Devices: kCpu (bit-exact with the sequential recurrence, which is also the
// test oracle), kCuda (a parallel scan; sums re-associate, so floating-point
// results match the CPU's within rounding), kAuto (CUDA where a device is
// usable, else the CPU).
#pragma once

#include <cstdint>
#include <span>

#include "perserve/status.h"
#include "scan/scan_algorithm.h"
#include "tree/priority_tree.h"  // tree::Device

namespace perserve::scan {

template <typename T>
struct ScanArrays {
  std::span<const T> x;
  std::span<const uint8_t> dones;
  int64_t streams = 0;
  int64_t length = 0;
  std::span<T> carry_sum;
  std::span<uint8_t> carry_done;
  std::span<T> out;
};

// Sizes consistent (x, dones, out: streams * length; carries: streams), both >= 0.
template <typename T>
Status ValidateScan(const ScanArrays<T>& arrays);

template <typename T>
Status EpisodicPrefixSum(const ScanArrays<T>& arrays, Boundary boundary, tree::Device device = tree::Device::kCpu);

// The sequential recurrence, one stream after another: the oracle.
template <typename T>
void EpisodicPrefixSumLoop(const ScanArrays<T>& arrays, Boundary boundary);

// The CPU's faster path for many streams: the loop, with the streams split
// over threads when the input is large enough to repay the fork/join (the
// loop itself already runs at ~1.4-2 G elements/s on one core, and a chunked
// parallel scan of one stream would re-associate its sums, so it would no
// longer be bit-exact). Bit-exact with the loop.
template <typename T>
void EpisodicPrefixSumParallel(const ScanArrays<T>& arrays, Boundary boundary);

// The CUDA path (host arrays in and out). kUnavailable without a device.
template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>& arrays, Boundary boundary);

}  // namespace perserve::scan
