// The CUDA episodic prefix sum: every element becomes a (value, reset) pair,
// the first of each stream with the stream's carry folded in and marked as a
// reset (so streams never leak into each other), and one cub inclusive scan
// with the associative operator of scan_algorithm.h runs over all streams at
// once. Host arrays in and out, on the workspace's stream and buffers.
//
// Not deterministic from run to run (episodic_prefix_sum.h): CUB's scan
// combines tile partials in an order that depends on timing.
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>

#include "scan/episodic_prefix_sum.h"
#include "tree/cuda/cuda_allocator.h"
#include "tree/cuda/cuda_check.h"
#include "tree/cuda/growing_buffers.h"
#include "tree/cuda/scoped_device.h"

namespace perserve::scan {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct Combine {
  __host__ __device__ ScanPair<T> operator()(const ScanPair<T>& earlier, const ScanPair<T>& later) const {
    return CombinePairs(earlier, later);
  }
};

#define PERSERVE_GRID_STRIDE(i, count)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void MakePairs(const T* d_x, const uint8_t* d_dones, const T* d_carry_sum, const uint8_t* d_carry_done,
                          int64_t length, int64_t elements, Boundary boundary, ScanPair<T>* d_pairs) {
  PERSERVE_GRID_STRIDE(i, elements) {
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
}

template <typename T>
__global__ void WriteOut(const ScanPair<T>* d_scanned, const uint8_t* d_dones, int64_t length, int64_t elements,
                         T* d_out, T* d_carry_sum, uint8_t* d_carry_done) {
  PERSERVE_GRID_STRIDE(i, elements) {
    d_out[i] = d_scanned[i].a;
    if ((i + 1) % length == 0) {
      d_carry_sum[i / length] = d_scanned[i].a;
      d_carry_done[i / length] = d_dones[i];
    }
  }
}

#undef PERSERVE_GRID_STRIDE

unsigned Blocks(int64_t work) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // the kernels loop over the rest
  return static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// The per-element buffers, sized for the wider element type (double), so one
// workspace serves both float and double calls.
enum ElementBuffer : size_t { kX, kOut, kDones, kPairs, kScanned };
enum StreamBuffer : size_t { kCarrySum, kCarryDone };

}  // namespace

struct CudaScanWorkspace::State {
  int device = 0;
  cudaStream_t stream = nullptr;
  cuda::GrowingBuffers elements{cuda::CudaAllocator::Get(),
                                {{cuda::MemoryKind::kDevice, sizeof(double)},
                                 {cuda::MemoryKind::kDevice, sizeof(double)},
                                 {cuda::MemoryKind::kDevice, sizeof(uint8_t)},
                                 {cuda::MemoryKind::kDevice, sizeof(ScanPair<double>)},
                                 {cuda::MemoryKind::kDevice, sizeof(ScanPair<double>)}}};
  cuda::GrowingBuffers streams{cuda::CudaAllocator::Get(),
                               {{cuda::MemoryKind::kDevice, sizeof(double)},
                                {cuda::MemoryKind::kDevice, sizeof(uint8_t)}}};
  cuda::GrowingBuffers temp{cuda::CudaAllocator::Get(), {{cuda::MemoryKind::kDevice, 1}}};

  ~State() {
    // On the workspace's device, whichever thread ends it; errors have nowhere to go.
    cuda::ScopedDevice on_device;
    on_device.Enter(device);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    elements.Release();
    streams.Release();
    temp.Release();
    if (stream != nullptr) cudaStreamDestroy(stream);
    cudaGetLastError();
  }
};

CudaScanWorkspace::CudaScanWorkspace(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaScanWorkspace::~CudaScanWorkspace() = default;

Status CudaScanWorkspace::Create(std::unique_ptr<CudaScanWorkspace>* workspace) {
  auto state = std::make_unique<State>();
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetDevice(&state->device), "cudaGetDevice"));
  PERSERVE_RETURN_IF_ERROR(
      cuda::Check(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  workspace->reset(new CudaScanWorkspace(std::move(state)));
  return Status::Ok();
}

template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>& arrays, Boundary boundary, CudaScanWorkspace* workspace) {
  const int64_t elements = arrays.streams * arrays.length;
  if (elements == 0) return Status::Ok();
  CudaScanWorkspace::State& state = *workspace->state();
  cuda::ScopedDevice on_device;
  PERSERVE_RETURN_IF_ERROR(on_device.Enter(state.device));

  // Everything that allocates, before anything is queued.
  PERSERVE_RETURN_IF_ERROR(state.elements.Reserve(elements));
  PERSERVE_RETURN_IF_ERROR(state.streams.Reserve(arrays.streams));
  T* d_x = state.elements.device<T>(kX);
  T* d_out = state.elements.device<T>(kOut);
  uint8_t* d_dones = state.elements.device<uint8_t>(kDones);
  ScanPair<T>* d_pairs = state.elements.device<ScanPair<T>>(kPairs);
  ScanPair<T>* d_scanned = state.elements.device<ScanPair<T>>(kScanned);
  T* d_carry_sum = state.streams.device<T>(kCarrySum);
  uint8_t* d_carry_done = state.streams.device<uint8_t>(kCarryDone);
  size_t temp_bytes = 0;
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cub::DeviceScan::InclusiveScan(nullptr, temp_bytes, d_pairs, d_scanned, Combine<T>{}, elements, state.stream),
      "cub::DeviceScan::InclusiveScan (size)"));
  PERSERVE_RETURN_IF_ERROR(state.temp.Reserve(static_cast<int64_t>(temp_bytes)));
  temp_bytes = static_cast<size_t>(state.temp.reserved());

  // The work, in stream order; then one wait, whatever happened.
  const cudaStream_t stream = state.stream;
  auto queue = [&]() -> Status {
    PERSERVE_RETURN_IF_ERROR(cuda::Check(
        cudaMemcpyAsync(d_x, arrays.x.data(), elements * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync x"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(
        cudaMemcpyAsync(d_dones, arrays.dones.data(), elements, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync dones"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMemcpyAsync(d_carry_sum, arrays.carry_sum.data(),
                                                         arrays.streams * sizeof(T), cudaMemcpyHostToDevice, stream),
                                         "cudaMemcpyAsync carry_sum"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(
        cudaMemcpyAsync(d_carry_done, arrays.carry_done.data(), arrays.streams, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync carry_done"));
    MakePairs<<<Blocks(elements), kThreads, 0, stream>>>(d_x, d_dones, d_carry_sum, d_carry_done, arrays.length,
                                                         elements, boundary, d_pairs);
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "MakePairs launch"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cub::DeviceScan::InclusiveScan(state.temp.device<void>(0), temp_bytes,
                                                                        d_pairs, d_scanned, Combine<T>{}, elements,
                                                                        stream),
                                         "cub::DeviceScan::InclusiveScan"));
    WriteOut<<<Blocks(elements), kThreads, 0, stream>>>(d_scanned, d_dones, arrays.length, elements, d_out,
                                                        d_carry_sum, d_carry_done);
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "WriteOut launch"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(
        cudaMemcpyAsync(arrays.out.data(), d_out, elements * sizeof(T), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync out"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMemcpyAsync(arrays.carry_sum.data(), d_carry_sum,
                                                         arrays.streams * sizeof(T), cudaMemcpyDeviceToHost, stream),
                                         "cudaMemcpyAsync carry_sum back"));
    return cuda::Check(
        cudaMemcpyAsync(arrays.carry_done.data(), d_carry_done, arrays.streams, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync carry_done back");
  };
  const Status queued = queue();
  const Status waited = cuda::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (scan)");
  return queued.ok() ? waited : queued;
}

template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>& arrays, Boundary boundary) {
  // One workspace per thread and device, kept until the thread ends.
  thread_local std::map<int, std::unique_ptr<CudaScanWorkspace>> workspaces;
  int device = 0;
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetDevice(&device), "cudaGetDevice"));
  std::unique_ptr<CudaScanWorkspace>& workspace = workspaces[device];
  if (workspace == nullptr) PERSERVE_RETURN_IF_ERROR(CudaScanWorkspace::Create(&workspace));
  return EpisodicPrefixSumCuda(arrays, boundary, workspace.get());
}

template Status EpisodicPrefixSumCuda<float>(const ScanArrays<float>&, Boundary, CudaScanWorkspace*);
template Status EpisodicPrefixSumCuda<double>(const ScanArrays<double>&, Boundary, CudaScanWorkspace*);
template Status EpisodicPrefixSumCuda<float>(const ScanArrays<float>&, Boundary);
template Status EpisodicPrefixSumCuda<double>(const ScanArrays<double>&, Boundary);

}  // namespace perserve::scan
