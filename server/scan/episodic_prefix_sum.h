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
//
// The CUDA scan is not deterministic from run to run: it is CUB's device scan
// (decoupled look-back), which combines the tiles' partial sums in an order
// that depends on timing, and floating-point addition is only
// pseudo-associative, so two runs over the same input can differ in the last
// bits (always within the rounding bound the tests hold it to). Use kCpu where
// bit-for-bit repeatable sums matter. docs/cuda.md says more.
#pragma once

#include <cstdint>
#include <memory>
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

// What the CUDA scan reuses from call to call: a stream of its own (not the
// legacy default stream, so a call neither waits for nor holds up other work
// on the device) and device buffers grown to the largest call so far and never
// shrunk, so a call no larger than an earlier one allocates nothing (an
// allocation would synchronise the whole device). Bound to the device current
// when it is created; each call runs there. Not thread-safe: one per thread.
class CudaScanWorkspace {
 public:
  // kUnavailable in a build without CUDA; a CUDA error as a Status otherwise.
  static Status Create(std::unique_ptr<CudaScanWorkspace>* workspace);
  ~CudaScanWorkspace();
  CudaScanWorkspace(const CudaScanWorkspace&) = delete;
  CudaScanWorkspace& operator=(const CudaScanWorkspace&) = delete;

  struct State;  // the stream and buffers (episodic_scan.cu)
  State* state() { return state_.get(); }

 private:
  explicit CudaScanWorkspace(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The CUDA path (host arrays in and out), on `workspace`'s device and stream;
// returns when the results are in `arrays`. kResourceExhausted when the
// buffers cannot grow to the input (the workspace stays usable for smaller
// inputs); kUnavailable without CUDA.
template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>& arrays, Boundary boundary, CudaScanWorkspace* workspace);

// The same on the calling thread's workspace for the current device, created
// on first use and kept until the thread ends. kUnavailable without a device.
template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>& arrays, Boundary boundary);

}  // namespace perserve::scan
