// CudaPriorityTree's dispatch: validation on the host, staging, launch shapes
// and the order of kernel launches (tree_kernels.cuh). Every CUDA call's error
// becomes a Status through cuda::Check.
#include "tree/cuda/cuda_priority_tree.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <cstring>
#include <vector>

#include "tree/cuda/cuda_check.h"
#include "tree/cuda/cuda_device.h"
#include "tree/cuda/tree_kernels.cuh"
#include "tree/strategy_table.h"
#include "tree/tree_validation.h"

namespace perserve::tree {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // kernels loop over the rest (grid-stride)
constexpr int64_t kInitialReserve = int64_t{1} << 16;

unsigned Blocks(int64_t work) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <typename T>
T* At(std::byte* base, int64_t offset_elements) {
  return reinterpret_cast<T*>(base) + offset_elements;
}

}  // namespace

CudaPriorityTree::CudaPriorityTree(int64_t capacity)
    : capacity_(capacity), levels_(std::countr_zero(static_cast<uint64_t>(capacity))) {}

Status CudaPriorityTree::Create(int64_t capacity, std::unique_ptr<CudaPriorityTree>* tree) {
  std::unique_ptr<CudaPriorityTree> created(new CudaPriorityTree(capacity));
  PERSERVE_RETURN_IF_ERROR(created->Allocate());
  *tree = std::move(created);
  return Status::Ok();
}

Status CudaPriorityTree::Allocate() {
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                       "cudaStreamCreateWithFlags"));
  const int64_t slots = 2 * capacity_;
  PERSERVE_RETURN_IF_ERROR(
      cuda::Check(cudaMalloc(&d_nodes_, static_cast<size_t>(slots) * sizeof(TreeNode)), "cudaMalloc (tree nodes)"));
  PERSERVE_RETURN_IF_ERROR(
      cuda::Check(cudaHostAlloc(&h_root_, sizeof(TreeNode), cudaHostAllocMapped), "cudaHostAlloc (root)"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaHostGetDevicePointer(&d_root_, h_root_, 0), "cudaHostGetDevicePointer"));
  *h_root_ = TreeNode{0.0, std::numeric_limits<double>::infinity()};
  kernels::Fill<<<Blocks(slots), kThreads, 0, stream_>>>(d_nodes_, slots);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "Fill launch"));
  PERSERVE_RETURN_IF_ERROR(Reserve(kInitialReserve));
  return Finish("creating the tree");
}

CudaPriorityTree::~CudaPriorityTree() {
  // Errors here have nowhere to go; each call still runs so nothing leaks.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  cudaFree(d_nodes_);
  cudaFreeHost(h_root_);
  cudaFreeHost(h_in_);
  cudaFreeHost(h_out_);
  for (int b = 0; b < 2; ++b) {
    cudaFree(d_keys_[b]);
    cudaFree(d_values_[b]);
  }
  cudaFree(d_sort_temp_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

Status CudaPriorityTree::Reserve(int64_t count) const {
  if (count <= reserved_) return Status::Ok();
  const int64_t size = std::max(count, 2 * reserved_);
  PERSERVE_RETURN_IF_ERROR(Finish("waiting before growing staging"));
  cudaFreeHost(h_in_);
  cudaFreeHost(h_out_);
  h_in_ = h_out_ = nullptr;
  reserved_ = 0;
  const size_t bytes = static_cast<size_t>(size) * (sizeof(int64_t) + sizeof(double));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaHostAlloc(&h_in_, bytes, cudaHostAllocMapped | cudaHostAllocWriteCombined), "cudaHostAlloc (staging in)"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaHostGetDevicePointer(&d_in_, h_in_, 0), "cudaHostGetDevicePointer"));
  PERSERVE_RETURN_IF_ERROR(
      cuda::Check(cudaHostAlloc(&h_out_, bytes, cudaHostAllocMapped), "cudaHostAlloc (staging out)"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaHostGetDevicePointer(&d_out_, h_out_, 0), "cudaHostGetDevicePointer"));
  reserved_ = size;
  return Status::Ok();
}

Status CudaPriorityTree::ReserveSort(int64_t count) {
  if (count <= sort_reserved_) return Status::Ok();
  const int64_t size = std::max(count, 2 * sort_reserved_);
  PERSERVE_RETURN_IF_ERROR(Finish("waiting before growing sort buffers"));
  for (int b = 0; b < 2; ++b) {
    cudaFree(d_keys_[b]);
    cudaFree(d_values_[b]);
    d_keys_[b] = nullptr;
    d_values_[b] = nullptr;
  }
  sort_reserved_ = 0;
  for (int b = 0; b < 2; ++b) {
    PERSERVE_RETURN_IF_ERROR(
        cuda::Check(cudaMalloc(&d_keys_[b], static_cast<size_t>(size) * sizeof(int64_t)), "cudaMalloc (sort keys)"));
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMalloc(&d_values_[b], static_cast<size_t>(size) * sizeof(double)),
                                         "cudaMalloc (sort values)"));
  }
  sort_reserved_ = size;
  return Status::Ok();
}

// Waits for everything queued, so nothing is left running behind an error,
// and reports the first error: a launch's, then the stream's.
Status CudaPriorityTree::Finish(const char* what) const {
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t run = cudaStreamSynchronize(stream_);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(launch, what));
  return cuda::Check(run, what);
}

// Runs the device part of an operation (inputs already validated) and waits
// for it. A CUDA error part way through can leave new leaves under stale sums,
// or a lost context: the tree then refuses every later operation, naming the
// first error, rather than serve from a tree it cannot vouch for.
template <typename Body>
Status CudaPriorityTree::OnDevice(const char* what, Body body) const {
  if (!failure_.empty()) return Status::Internal(failure_);
  Status status = body();
  const Status finished = Finish(what);
  if (status.ok()) status = finished;
  if (!status.ok()) failure_ = "the CUDA tree is unusable after a CUDA error: " + status.ToString();
  return status;
}

const StrategyTable* CudaPriorityTree::AutoTable() {
  if (auto_table_ != nullptr || auto_failed_) return auto_table_;
  const int64_t capacity = capacity_;
  auto_table_ = StrategyTable::Cached("cuda", capacity, [capacity]() -> std::optional<StrategyTable> {
    std::unique_ptr<CudaPriorityTree> scratch;
    const Status created = Create(capacity, &scratch);
    if (!created.ok()) return std::nullopt;
    constexpr UpdateStrategy kCandidates[] = {UpdateStrategy::kSparse, UpdateStrategy::kRebuild};
    return StrategyTable::Measure(
        capacity, kCandidates,
        [&](UpdateStrategy strategy, std::span<const int64_t> indices, std::span<const double> values) {
          return scratch->OnDevice("calibration update", [&] {
            return scratch->UpdateOnDevice(strategy, indices, values, false, 1.0);
          });
        });
  });
  // Without a table, auto stays sparse (O(k log n) at any size) for this tree.
  auto_failed_ = auto_table_ == nullptr;
  return auto_table_;
}

std::string CudaPriorityTree::DescribeAutoTable() {
  const StrategyTable* table = AutoTable();
  return table != nullptr ? table->Describe() : "not measured (no scratch tree): sparse at every size\n";
}

UpdateStrategy CudaPriorityTree::Resolve(int64_t count) {
  if (strategy_ == UpdateStrategy::kRebuild) return UpdateStrategy::kRebuild;
  if (strategy_ == UpdateStrategy::kAuto) {
    const StrategyTable* table = AutoTable();
    if (table != nullptr && table->Choose(count) == UpdateStrategy::kRebuild) return UpdateStrategy::kRebuild;
  }
  return UpdateStrategy::kSparse;
}

Status CudaPriorityTree::Update(std::span<const int64_t> indices, std::span<const double> values) {
  PERSERVE_RETURN_IF_ERROR(ValidateUpdateBatch(indices, values, capacity_));
  PERSERVE_RETURN_IF_ERROR(ValidateTotalStaysBounded(*this, indices, values));
  const UpdateStrategy strategy = Resolve(static_cast<int64_t>(indices.size()));
  return OnDevice("update", [&] { return UpdateOnDevice(strategy, indices, values, false, 1.0); });
}

Status CudaPriorityTree::UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                                            double alpha) {
  PERSERVE_RETURN_IF_ERROR(ValidateExponentBatch(indices, priorities, alpha, capacity_));
  PERSERVE_RETURN_IF_ERROR(ValidateTotalStaysBounded(*this, indices, priorities, alpha));
  const UpdateStrategy strategy = Resolve(static_cast<int64_t>(indices.size()));
  return OnDevice("update", [&] { return UpdateOnDevice(strategy, indices, priorities, true, alpha); });
}

Status CudaPriorityTree::UpdateOnDevice(UpdateStrategy strategy, std::span<const int64_t> indices,
                                        std::span<const double> values, bool exponent, double alpha) {
  const int64_t count = static_cast<int64_t>(indices.size());
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(Reserve(count));
  std::memcpy(At<int64_t>(h_in_, 0), indices.data(), indices.size_bytes());
  std::memcpy(At<double>(h_in_, count), values.data(), values.size_bytes());
  const int64_t* d_indices = At<int64_t>(d_in_, 0);
  const double* d_values = At<double>(d_in_, count);
  const bool sparse = strategy != UpdateStrategy::kRebuild;

  if (count <= kernels::kBlockBatch) {
    // One kernel: sort, write, and (sparse) every level to the root.
    kernels::SmallBatch<<<1, kernels::kBlockThreads, 0, stream_>>>(d_indices, d_values, count, exponent, alpha,
                                                                   sparse, d_nodes_, capacity_, levels_, d_root_);
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "SmallBatch launch"));
    return sparse ? Status::Ok() : RebuildInternalNodes();
  }

  PERSERVE_RETURN_IF_ERROR(ReserveSort(count));
  // The device sort reads its input several times: copy it off the host once.
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMemcpyAsync(d_keys_[0], At<int64_t>(h_in_, 0), indices.size_bytes(),
                                                       cudaMemcpyHostToDevice, stream_),
                                       "cudaMemcpyAsync (indices)"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMemcpyAsync(d_values_[0], At<double>(h_in_, count), values.size_bytes(),
                                                       cudaMemcpyHostToDevice, stream_),
                                       "cudaMemcpyAsync (values)"));
  cub::DoubleBuffer<int64_t> keys(d_keys_[0], d_keys_[1]);
  cub::DoubleBuffer<double> sorted_values(d_values_[0], d_values_[1]);
  const int end_bit = std::max(levels_, 1);
  size_t needed = 0;
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cub::DeviceRadixSort::SortPairs(nullptr, needed, keys, sorted_values, count, 0, end_bit, stream_),
      "DeviceRadixSort::SortPairs (size)"));
  if (needed > sort_temp_bytes_) {
    PERSERVE_RETURN_IF_ERROR(Finish("waiting before growing sort storage"));
    cudaFree(d_sort_temp_);
    d_sort_temp_ = nullptr;
    sort_temp_bytes_ = 0;
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaMalloc(&d_sort_temp_, needed), "cudaMalloc (sort storage)"));
    sort_temp_bytes_ = needed;
  }
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cub::DeviceRadixSort::SortPairs(d_sort_temp_, sort_temp_bytes_, keys,
                                                                       sorted_values, count, 0, end_bit, stream_),
                                       "DeviceRadixSort::SortPairs"));
  kernels::WriteLastOfRuns<<<Blocks(count), kThreads, 0, stream_>>>(keys.Current(), sorted_values.Current(), count,
                                                                    exponent, alpha, d_nodes_, capacity_);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "WriteLastOfRuns launch"));
  if (!sparse) return RebuildInternalNodes();
  // Level by level (stream order separates them) until the rest fits one block.
  int height = 1;
  for (; height <= levels_ && (capacity_ >> height) > kernels::kTopLevelNodes; ++height) {
    kernels::SparseLevel<<<Blocks(count), kThreads, 0, stream_>>>(d_nodes_, capacity_, keys.Current(), count, height);
  }
  kernels::TopLevels<<<1, kernels::kBlockThreads, 0, stream_>>>(d_nodes_, capacity_ >> height, d_root_);
  return cuda::Check(cudaGetLastError(), "sparse level launches");
}

Status CudaPriorityTree::RebuildInternalNodes() {
  // Sequential over levels (stream order: a parent's level starts only after
  // its children's has finished), parallel within each.
  int64_t first = capacity_ >> 1;
  for (; first > kernels::kTopLevelNodes; first >>= 1) {
    kernels::RebuildLevel<<<Blocks(first), kThreads, 0, stream_>>>(d_nodes_, first);
  }
  kernels::TopLevels<<<1, kernels::kBlockThreads, 0, stream_>>>(d_nodes_, first, d_root_);
  return cuda::Check(cudaGetLastError(), "rebuild launches");
}

Status CudaPriorityTree::FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const {
  PERSERVE_RETURN_IF_ERROR(ValidateDescentBatch(masses, indices, Total()));
  const int64_t count = static_cast<int64_t>(masses.size());
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(OnDevice("descent", [&] {
    PERSERVE_RETURN_IF_ERROR(Reserve(count));
    std::memcpy(At<double>(h_in_, 0), masses.data(), masses.size_bytes());
    kernels::Descend<<<Blocks(count), kThreads, 0, stream_>>>(d_nodes_, capacity_, levels_, At<double>(d_in_, 0),
                                                              count, At<int64_t>(d_out_, 0));
    return Status::Ok();
  }));
  std::memcpy(indices.data(), At<int64_t>(h_out_, 0), indices.size_bytes());
  return Status::Ok();
}

Status CudaPriorityTree::Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                                std::span<double> values) const {
  PERSERVE_RETURN_IF_ERROR(ValidateSampleBatch(indices, values, Total()));
  const int64_t count = static_cast<int64_t>(indices.size());
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(OnDevice("sample", [&] {
    PERSERVE_RETURN_IF_ERROR(Reserve(count));
    kernels::Sample<<<Blocks(count), kThreads, 0, stream_>>>(d_nodes_, capacity_, levels_, seed, counter, count,
                                                             At<int64_t>(d_out_, 0), At<double>(d_out_, count));
    return Status::Ok();
  }));
  std::memcpy(indices.data(), At<int64_t>(h_out_, 0), indices.size_bytes());
  std::memcpy(values.data(), At<double>(h_out_, count), values.size_bytes());
  return Status::Ok();
}

Status CudaPriorityTree::Get(std::span<const int64_t> indices, std::span<double> values) const {
  PERSERVE_RETURN_IF_ERROR(ValidateGetBatch(indices, values, capacity_));
  const int64_t count = static_cast<int64_t>(indices.size());
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(OnDevice("get", [&] {
    PERSERVE_RETURN_IF_ERROR(Reserve(count));
    std::memcpy(At<int64_t>(h_in_, 0), indices.data(), indices.size_bytes());
    kernels::GatherLeaves<<<Blocks(count), kThreads, 0, stream_>>>(d_nodes_, capacity_, At<int64_t>(d_in_, 0),
                                                                   count, At<double>(d_out_, 0));
    return Status::Ok();
  }));
  std::memcpy(values.data(), At<double>(h_out_, 0), values.size_bytes());
  return Status::Ok();
}

Status CudaPriorityTree::ReadNodes(std::span<double> sums, std::span<double> mins) const {
  PERSERVE_RETURN_IF_ERROR(ValidateNodeSpans(sums, mins, capacity_));
  std::vector<TreeNode> nodes(static_cast<size_t>(2 * capacity_));
  PERSERVE_RETURN_IF_ERROR(OnDevice("reading nodes", [&] {
    return cuda::Check(cudaMemcpyAsync(nodes.data(), d_nodes_, nodes.size() * sizeof(TreeNode),
                                       cudaMemcpyDeviceToHost, stream_),
                       "cudaMemcpyAsync (nodes)");
  }));
  SplitNodes(nodes.data(), 2 * capacity_, sums.data(), mins.data());
  return Status::Ok();
}

Status CreateCudaPriorityTree(int64_t capacity, std::unique_ptr<PriorityTree>* tree) {
  std::unique_ptr<CudaPriorityTree> created;
  PERSERVE_RETURN_IF_ERROR(CudaPriorityTree::Create(capacity, &created));
  *tree = std::move(created);
  return Status::Ok();
}

}  // namespace perserve::tree
