// The CUDA episodic prefix sum: every element becomes a (value, reset) pair,
// the first of each stream with the stream's carry folded in and marked as a
// reset (so streams never leak into each other), and one cub inclusive scan
// with the associative operator of scan_algorithm.h runs over all streams at
// once. Host arrays in and out; device buffers are allocated per call (this
// is the standalone entry point, not a hot path of the replay rank).
#include <cub/device/device_scan.cuh>

#include <cstdint>
#include <vector>

#include "scan/episodic_prefix_sum.h"
#include "tree/cuda/cuda_check.h"

namespace perserve::scan {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct Combine {
  __host__ __device__ ScanPair<T> operator()(const ScanPair<T>& earlier, const ScanPair<T>& later) const {
    return CombinePairs(earlier, later);
  }
};

template <typename T>
__global__ void MakePairs(const T* d_x, const uint8_t* d_dones, const T* d_carry_sum, const uint8_t* d_carry_done,
                          int64_t length, int64_t elements, Boundary boundary, ScanPair<T>* d_pairs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  const int64_t stream = i / length;
  const int64_t t = i - stream * length;
  const uint8_t previous_done = t == 0 ? d_carry_done[stream] : d_dones[i - 1];
  const bool reset = ResetsAt(boundary, d_dones[i], previous_done);
  if (t == 0) {
    d_pairs[i] = ScanPair<T>{ScanStep(d_x[i], reset, d_carry_sum[stream]), true};
  } else {
    d_pairs[i] = ScanPair<T>{d_x[i], reset};
  }
}

template <typename T>
__global__ void WriteOut(const ScanPair<T>* d_scanned, const uint8_t* d_dones, int64_t length, int64_t elements,
                         T* d_out, T* d_carry_sum, uint8_t* d_carry_done) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  d_out[i] = d_scanned[i].a;
  if ((i + 1) % length == 0) {
    d_carry_sum[i / length] = d_scanned[i].a;
    d_carry_done[i / length] = d_dones[i];
  }
}

// Device buffers freed on every path out.
struct DeviceBuffers {
  std::vector<void*> pointers;
  ~DeviceBuffers() {
    for (void* p : pointers) cudaFree(p);
  }
  template <typename U>
  Status Allocate(U** pointer, size_t count) {
    void* raw = nullptr;
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMalloc(&raw, count * sizeof(U) + 1), "cudaMalloc"));
    pointers.push_back(raw);
    *pointer = static_cast<U*>(raw);
    return Status::Ok();
  }
};

}  // namespace

template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>& arrays, Boundary boundary) {
  const int64_t elements = arrays.streams * arrays.length;
  if (elements == 0) return Status::Ok();
  DeviceBuffers buffers;
  T *d_x, *d_out, *d_carry_sum;
  uint8_t *d_dones, *d_carry_done;
  ScanPair<T> *d_pairs, *d_scanned;
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_x, elements));
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_out, elements));
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_dones, elements));
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_carry_sum, arrays.streams));
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_carry_done, arrays.streams));
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_pairs, elements));
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_scanned, elements));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaMemcpy(d_x, arrays.x.data(), elements * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy x"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaMemcpy(d_dones, arrays.dones.data(), elements, cudaMemcpyHostToDevice), "cudaMemcpy dones"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMemcpy(d_carry_sum, arrays.carry_sum.data(),
                                                  arrays.streams * sizeof(T), cudaMemcpyHostToDevice),
                                       "cudaMemcpy carry_sum"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaMemcpy(d_carry_done, arrays.carry_done.data(), arrays.streams, cudaMemcpyHostToDevice),
      "cudaMemcpy carry_done"));

  const unsigned blocks = static_cast<unsigned>((elements + kThreads - 1) / kThreads);
  MakePairs<<<blocks, kThreads>>>(d_x, d_dones, d_carry_sum, d_carry_done, arrays.length, elements, boundary,
                                  d_pairs);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "MakePairs"));
  size_t temp_bytes = 0;
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cub::DeviceScan::InclusiveScan(nullptr, temp_bytes, d_pairs, d_scanned, Combine<T>{}, elements),
      "cub::DeviceScan::InclusiveScan (size)"));
  std::byte* d_temp = nullptr;
  PERSERVE_RETURN_IF_ERROR(buffers.Allocate(&d_temp, temp_bytes));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cub::DeviceScan::InclusiveScan(d_temp, temp_bytes, d_pairs, d_scanned, Combine<T>{}, elements),
      "cub::DeviceScan::InclusiveScan"));
  WriteOut<<<blocks, kThreads>>>(d_scanned, d_dones, arrays.length, elements, d_out, d_carry_sum, d_carry_done);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "WriteOut"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaMemcpy(arrays.out.data(), d_out, elements * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy out"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMemcpy(arrays.carry_sum.data(), d_carry_sum,
                                                  arrays.streams * sizeof(T), cudaMemcpyDeviceToHost),
                                       "cudaMemcpy carry_sum back"));
  return cuda::Check(cudaMemcpy(arrays.carry_done.data(), d_carry_done, arrays.streams, cudaMemcpyDeviceToHost),
                     "cudaMemcpy carry_done back");
}

template Status EpisodicPrefixSumCuda<float>(const ScanArrays<float>&, Boundary);
template Status EpisodicPrefixSumCuda<double>(const ScanArrays<double>&, Boundary);

}  // namespace perserve::scan
