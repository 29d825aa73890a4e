#include <algorithm>

#include <omp.h>

#include <fmt/format.h>

#include "scan/episodic_prefix_sum.h"
#include "tree/cuda/cuda_device.h"

namespace perserve::scan {
namespace {

// Inputs at least this large, with at least two streams, are split over
// threads by streams: below it the fork/join costs more than it saves.
constexpr int64_t kParallelElements = int64_t{1} << 18;

// The sequential recurrence over streams [first, last).
template <typename T>
void ScanStreams(const ScanArrays<T>& arrays, Boundary boundary, int64_t first, int64_t last) {
  for (int64_t s = first; s < last; ++s) {
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
  ScanStreams(arrays, boundary, 0, arrays.streams);
}

template <typename T>
void EpisodicPrefixSumParallel(const ScanArrays<T>& arrays, Boundary boundary) {
  if (arrays.streams < 2 || arrays.streams * arrays.length < kParallelElements) {
    ScanStreams(arrays, boundary, 0, arrays.streams);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    ScanStreams(arrays, boundary, arrays.streams * thread / threads, arrays.streams * (thread + 1) / threads);
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
  EpisodicPrefixSumParallel(arrays, boundary);
  return Status::Ok();
}

#define PERSERVE_INSTANTIATE_SCAN(T)                                                          \
  template Status ValidateScan<T>(const ScanArrays<T>&);                                      \
  template void EpisodicPrefixSumLoop<T>(const ScanArrays<T>&, Boundary);                    \
  template void EpisodicPrefixSumParallel<T>(const ScanArrays<T>&, Boundary);                \
  template Status EpisodicPrefixSum<T>(const ScanArrays<T>&, Boundary, tree::Device);
PERSERVE_INSTANTIATE_SCAN(float)
PERSERVE_INSTANTIATE_SCAN(double)
#undef PERSERVE_INSTANTIATE_SCAN

}  // namespace perserve::scan
