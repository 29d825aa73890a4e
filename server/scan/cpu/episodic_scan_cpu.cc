#include <algorithm>

#include <fmt/format.h>

#include "scan/episodic_prefix_sum.h"
#include "tree/cuda/cuda_device.h"

namespace perserve::scan {
namespace {

// Streams scanned in lockstep by the interleaved path: enough independent
// additions in flight to hide the add latency of each stream's chain.
constexpr int64_t kLockstepStreams = 8;
// Inputs at least this large are split over threads (by groups of streams).
constexpr int64_t kParallelElements = int64_t{1} << 18;

template <typename T>
void ScanStreams(const ScanArrays<T>& arrays, Boundary boundary, int64_t first, int64_t last) {
  const int64_t length = arrays.length;
  T sum[kLockstepStreams];
  uint8_t done[kLockstepStreams];
  for (int64_t group = first; group < last; group += kLockstepStreams) {
    const int64_t lanes = std::min(kLockstepStreams, last - group);
    for (int64_t lane = 0; lane < lanes; ++lane) {
      sum[lane] = arrays.carry_sum[group + lane];
      done[lane] = arrays.carry_done[group + lane];
    }
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t lane = 0; lane < lanes; ++lane) {
        const int64_t i = (group + lane) * length + t;
        const uint8_t d = arrays.dones[i];
        sum[lane] = ScanStep(arrays.x[i], ResetsAt(boundary, d, done[lane]), sum[lane]);
        done[lane] = d;
        arrays.out[i] = sum[lane];
      }
    }
    for (int64_t lane = 0; lane < lanes && length > 0; ++lane) {
      arrays.carry_sum[group + lane] = sum[lane];
      arrays.carry_done[group + lane] = done[lane];
    }
  }
}

}  // namespace

template <typename T>
Status ValidateScan(const ScanArrays<T>& arrays) {
  if (arrays.streams < 0 || arrays.length < 0) {
    return Status::InvalidArgument(fmt::format("streams {} and length {} must be >= 0", arrays.streams,
                                               arrays.length));
  }
  const uint64_t elements = static_cast<uint64_t>(arrays.streams) * static_cast<uint64_t>(arrays.length);
  if (arrays.x.size() != elements || arrays.dones.size() != elements || arrays.out.size() != elements) {
    return Status::InvalidArgument(fmt::format("x, dones and out must hold streams * length = {} elements (got {}, "
                                               "{}, {})",
                                               elements, arrays.x.size(), arrays.dones.size(), arrays.out.size()));
  }
  if (arrays.carry_sum.size() != static_cast<uint64_t>(arrays.streams) ||
      arrays.carry_done.size() != static_cast<uint64_t>(arrays.streams)) {
    return Status::InvalidArgument(fmt::format("carry_sum and carry_done must hold one value per stream ({})",
                                               arrays.streams));
  }
  return Status::Ok();
}

template <typename T>
void EpisodicPrefixSumLoop(const ScanArrays<T>& arrays, Boundary boundary) {
  for (int64_t s = 0; s < arrays.streams; ++s) {
    T sum = arrays.carry_sum[s];
    uint8_t previous_done = arrays.carry_done[s];
    for (int64_t t = 0; t < arrays.length; ++t) {
      const int64_t i = s * arrays.length + t;
      sum = ScanStep(arrays.x[i], ResetsAt(boundary, arrays.dones[i], previous_done), sum);
      previous_done = arrays.dones[i];
      arrays.out[i] = sum;
    }
    if (arrays.length > 0) {
      arrays.carry_sum[s] = sum;
      arrays.carry_done[s] = previous_done;
    }
  }
}

template <typename T>
void EpisodicPrefixSumInterleaved(const ScanArrays<T>& arrays, Boundary boundary) {
  const int64_t groups = (arrays.streams + kLockstepStreams - 1) / kLockstepStreams;
  if (arrays.streams * arrays.length < kParallelElements || groups < 2) {
    ScanStreams(arrays, boundary, 0, arrays.streams);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t group = 0; group < groups; ++group) {
    ScanStreams(arrays, boundary, group * kLockstepStreams,
                std::min(arrays.streams, (group + 1) * kLockstepStreams));
  }
}

template <typename T>
Status EpisodicPrefixSum(const ScanArrays<T>& arrays, Boundary boundary, tree::Device device) {
  PERSERVE_RETURN_IF_ERROR(ValidateScan(arrays));
  if (boundary != Boundary::kEndsAt && boundary != Boundary::kStartsAt) {
    return Status::InvalidArgument("boundary must be 0 (ends_at) or 1 (starts_at)");
  }
  if (device != tree::Device::kCpu) {
    std::string why;
    if (tree::UsableCudaDeviceCount(&why) > 0) return EpisodicPrefixSumCuda(arrays, boundary);
    if (device == tree::Device::kCuda) return Status::Unavailable("device \"cuda\" requested, but " + why);
  }
  EpisodicPrefixSumInterleaved(arrays, boundary);
  return Status::Ok();
}

#define PERSERVE_INSTANTIATE_SCAN(T)                                                          \
  template Status ValidateScan<T>(const ScanArrays<T>&);                                      \
  template void EpisodicPrefixSumLoop<T>(const ScanArrays<T>&, Boundary);                    \
  template void EpisodicPrefixSumInterleaved<T>(const ScanArrays<T>&, Boundary);             \
  template Status EpisodicPrefixSum<T>(const ScanArrays<T>&, Boundary, tree::Device);
PERSERVE_INSTANTIATE_SCAN(float)
PERSERVE_INSTANTIATE_SCAN(double)
#undef PERSERVE_INSTANTIATE_SCAN

}  // namespace perserve::scan
