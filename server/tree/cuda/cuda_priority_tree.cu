// CudaPriorityTree's dispatch: validation on the host, staging, launch shapes
// and the order of kernel launches (tree_kernels.cuh). Every CUDA call's error
// becomes a Status through cuda::Check; OperationLatch decides which errors
// the tree survives.
#include "tree/cuda/cuda_priority_tree.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <cstring>
#include <vector>

#include "tree/cuda/cuda_allocator.h"
#include "tree/cuda/cuda_check.h"
#include "tree/cuda/cuda_device.h"
#include "tree/cuda/scoped_device.h"
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

// The staging buffers (16 bytes an element each) and the sort's buffers.
enum StagingBuffer : size_t { kStagingIn, kStagingOut };
enum SortBuffer : size_t { kSortKeys0, kSortKeys1, kSortValues0, kSortValues1 };

// Where an update's values start in kStagingIn, after `count` indices: an
// even element, so both halves are 16-byte aligned (SmallBatch loads each
// thread's two items with one 16-byte load). The staging then needs
// InputValuesOffset(count) elements.
int64_t InputValuesOffset(int64_t count) { return (count + 1) & ~int64_t{1}; }

}  // namespace

CudaPriorityTree::CudaPriorityTree(int64_t capacity, cuda::DeviceAllocator* allocator)
    : capacity_(capacity),
      levels_(std::countr_zero(static_cast<uint64_t>(capacity))),
      staging_(allocator, {{cuda::MemoryKind::kMappedWriteCombined, 16}, {cuda::MemoryKind::kMapped, 16}}),
      sort_(allocator, {{cuda::MemoryKind::kDevice, sizeof(int64_t)},
                        {cuda::MemoryKind::kDevice, sizeof(int64_t)},
                        {cuda::MemoryKind::kDevice, sizeof(double)},
                        {cuda::MemoryKind::kDevice, sizeof(double)}}),
      sort_temp_(allocator, {{cuda::MemoryKind::kDevice, 1}}) {}

Status CudaPriorityTree::Create(int64_t capacity, std::unique_ptr<CudaPriorityTree>* tree) {
  std::unique_ptr<CudaPriorityTree> created(new CudaPriorityTree(capacity, cuda::CudaAllocator::Get()));
  PERSERVE_RETURN_IF_ERROR(created->Allocate());
  *tree = std::move(created);
  return Status::Ok();
}

std::unique_ptr<CudaPriorityTree> CudaPriorityTree::CreateWithoutDeviceForTesting(int64_t capacity,
                                                                                  cuda::DeviceAllocator* allocator) {
  return std::unique_ptr<CudaPriorityTree>(
      new CudaPriorityTree(capacity, allocator != nullptr ? allocator : cuda::CudaAllocator::Get()));
}

Status CudaPriorityTree::Allocate() {
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetDevice(&device_), "cudaGetDevice"));
  cudaDeviceProp properties;
  PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetDeviceProperties(&properties, device_), "cudaGetDeviceProperties"));
  device_type_ = std::string("cuda:") + properties.name + " (" + std::to_string(properties.multiProcessorCount) +
                 " SMs, sm_" + std::to_string(properties.major * 10 + properties.minor) + ")";
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
  PERSERVE_RETURN_IF_ERROR(ReserveStaging(kInitialReserve));
  return Finish("creating the tree");
}

CudaPriorityTree::~CudaPriorityTree() {
  // Errors here have nowhere to go; each call still runs so nothing leaks.
  // On the tree's device, whichever thread destroys it.
  cuda::ScopedDevice device;
  if (stream_ != nullptr) {
    device.Enter(device_);
    cudaStreamSynchronize(stream_);
  }
  staging_.Release();
  sort_.Release();
  sort_temp_.Release();
  if (d_nodes_ != nullptr) cudaFree(d_nodes_);
  if (h_root_ != nullptr) cudaFreeHost(h_root_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

// No device work is in flight here (every operation waits for its own), so
// the old buffers may go.
Status CudaPriorityTree::ReserveStaging(int64_t count) const { return staging_.Reserve(InputValuesOffset(count)); }

// Waits for everything queued, so nothing is left running behind an error,
// and reports the first error: a launch's, then the stream's.
Status CudaPriorityTree::Finish(const char* what) const {
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t run = cudaStreamSynchronize(stream_);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(launch, what));
  return cuda::Check(run, what);
}

// Runs the device part of an operation (inputs already validated) on the
// tree's device and waits for it, under the latch's rule (operation_latch.h):
// an error in `prepare` (setting the device, growing buffers: nothing queued)
// is returned and the tree stays usable; one after `queue` started closes the
// latch, since new leaves may sit under stale sums, or the context is lost.
template <typename Prepare, typename Queue>
Status CudaPriorityTree::OnDevice(const char* what, Prepare prepare, Queue queue) const {
  cuda::ScopedDevice device;
  return latch_.Run(
      [&] {
        PERSERVE_RETURN_IF_ERROR(device.Enter(device_));
        return prepare();
      },
      queue, [&] { return Finish(what); });
}

const StrategyTable* CudaPriorityTree::AutoTable() {
  if (auto_table_ != nullptr || auto_failed_) return auto_table_;
  const int64_t capacity = capacity_;
  const int device = device_;
  // Keyed by the device's type as well as the capacity: two kinds of GPU in
  // one process each get their own crossovers.
  auto_table_ = StrategyTable::Cached(device_type_, capacity, [capacity, device]() -> std::optional<StrategyTable> {
    cuda::ScopedDevice on_device;  // the scratch tree goes on this tree's device
    if (device < 0 || !on_device.Enter(device).ok()) return std::nullopt;
    std::unique_ptr<CudaPriorityTree> scratch;
    const Status created = Create(capacity, &scratch);
    if (!created.ok()) return std::nullopt;
    constexpr UpdateStrategy kCandidates[] = {UpdateStrategy::kSparse, UpdateStrategy::kRebuild};
    return StrategyTable::Measure(
        capacity, kCandidates,
        [&](UpdateStrategy strategy, std::span<const int64_t> indices, std::span<const double> values) {
          return scratch->OnDevice(
              "calibration update", [&] { return scratch->PrepareUpdate(static_cast<int64_t>(indices.size())); },
              [&] { return scratch->QueueUpdate(strategy, indices, values, false, 1.0); });
        });
  });
  // Without a table, auto stays sparse (O(k log n) at any size) for this tree.
  auto_failed_ = auto_table_ == nullptr;
  return auto_table_;
}

std::string CudaPriorityTree::DescribeAutoTable() {
  if (latch_.closed()) return "not measured: " + latch_.Refusal().ToString() + "\n";
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
  PERSERVE_RETURN_IF_ERROR(latch_.Refusal());
  PERSERVE_RETURN_IF_ERROR(ValidateUpdateBatch(indices, values, capacity_));
  PERSERVE_RETURN_IF_ERROR(ValidateTotalStaysBounded(*this, indices, values));
  const UpdateStrategy strategy = Resolve(static_cast<int64_t>(indices.size()));
  return OnDevice("update", [&] { return PrepareUpdate(static_cast<int64_t>(indices.size())); },
                  [&] { return QueueUpdate(strategy, indices, values, false, 1.0); });
}

Status CudaPriorityTree::UpdateWithExponent(std::span<const int64_t> indices, std::span<const double> priorities,
                                            double alpha) {
  PERSERVE_RETURN_IF_ERROR(latch_.Refusal());
  PERSERVE_RETURN_IF_ERROR(ValidateExponentBatch(indices, priorities, alpha, capacity_));
  PERSERVE_RETURN_IF_ERROR(ValidateTotalStaysBounded(*this, indices, priorities, alpha));
  const UpdateStrategy strategy = Resolve(static_cast<int64_t>(indices.size()));
  return OnDevice("update", [&] { return PrepareUpdate(static_cast<int64_t>(indices.size())); },
                  [&] { return QueueUpdate(strategy, indices, priorities, true, alpha); });
}

Status CudaPriorityTree::PrepareUpdate(int64_t count) {
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(ReserveStaging(count));
  if (count <= kernels::kBlockBatch) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(sort_.Reserve(count));
  // The sort's temporary storage, sized now so that nothing allocates once
  // work is queued (a size query: it queues nothing).
  cub::DoubleBuffer<int64_t> keys(sort_.device<int64_t>(kSortKeys0), sort_.device<int64_t>(kSortKeys1));
  cub::DoubleBuffer<double> values(sort_.device<double>(kSortValues0), sort_.device<double>(kSortValues1));
  size_t needed = 0;
  PERSERVE_RETURN_IF_ERROR(
      cuda::Check(cub::DeviceRadixSort::SortPairs(nullptr, needed, keys, values, count, 0, std::max(levels_, 1), stream_),
                  "DeviceRadixSort::SortPairs (size)"));
  return sort_temp_.Reserve(static_cast<int64_t>(needed));
}

Status CudaPriorityTree::QueueUpdate(UpdateStrategy strategy, std::span<const int64_t> indices,
                                     std::span<const double> values, bool exponent, double alpha) {
  const int64_t count = static_cast<int64_t>(indices.size());
  if (count == 0) return Status::Ok();
  std::byte* h_in = staging_.host<std::byte>(kStagingIn);
  std::byte* d_in = staging_.device<std::byte>(kStagingIn);
  const int64_t values_offset = InputValuesOffset(count);
  std::memcpy(At<int64_t>(h_in, 0), indices.data(), indices.size_bytes());
  std::memcpy(At<double>(h_in, values_offset), values.data(), values.size_bytes());
  const int64_t* d_indices = At<int64_t>(d_in, 0);
  const double* d_values = At<double>(d_in, values_offset);
  const bool sparse = strategy != UpdateStrategy::kRebuild;

  if (count <= kernels::kBlockBatch) {
    // One kernel: sort, write, and (sparse) every level to the root.
    kernels::SmallBatch<<<1, kernels::kBlockThreads, 0, stream_>>>(d_indices, d_values, count, exponent, alpha,
                                                                   sparse, d_nodes_, capacity_, levels_, d_root_);
    PERSERVE_RETURN_IF_ERROR(cuda::Check(cudaGetLastError(), "SmallBatch launch"));
    return sparse ? Status::Ok() : RebuildInternalNodes();
  }

  // The device sort reads its input several times: copy it off the host once.
  int64_t* d_keys0 = sort_.device<int64_t>(kSortKeys0);
  double* d_values0 = sort_.device<double>(kSortValues0);
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaMemcpyAsync(d_keys0, At<int64_t>(h_in, 0), indices.size_bytes(), cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync (indices)"));
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cudaMemcpyAsync(d_values0, At<double>(h_in, values_offset), values.size_bytes(), cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync (values)"));
  cub::DoubleBuffer<int64_t> keys(d_keys0, sort_.device<int64_t>(kSortKeys1));
  cub::DoubleBuffer<double> sorted_values(d_values0, sort_.device<double>(kSortValues1));
  size_t temp_bytes = static_cast<size_t>(sort_temp_.reserved());  // PrepareUpdate sized it
  PERSERVE_RETURN_IF_ERROR(cuda::Check(
      cub::DeviceRadixSort::SortPairs(sort_temp_.device<void>(0), temp_bytes, keys, sorted_values, count, 0,
                                      std::max(levels_, 1), stream_),
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

// The queries check the latch before anything else: a failed tree's Total()
// is NaN, and its error, not "total is 0", is what a caller should see.
Status CudaPriorityTree::FindPrefixSum(std::span<const double> masses, std::span<int64_t> indices) const {
  PERSERVE_RETURN_IF_ERROR(latch_.Refusal());
  PERSERVE_RETURN_IF_ERROR(ValidateDescentBatch(masses, indices, Total()));
  const int64_t count = static_cast<int64_t>(masses.size());
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(OnDevice(
      "descent", [&] { return ReserveStaging(count); },
      [&] {
        std::memcpy(staging_.host<double>(kStagingIn), masses.data(), masses.size_bytes());
        kernels::Descend<<<Blocks(count), kThreads, 0, stream_>>>(
            d_nodes_, capacity_, levels_, staging_.device<double>(kStagingIn), count,
            staging_.device<int64_t>(kStagingOut));
        return cuda::Check(cudaGetLastError(), "Descend launch");
      }));
  std::memcpy(indices.data(), staging_.host<int64_t>(kStagingOut), indices.size_bytes());
  return Status::Ok();
}

Status CudaPriorityTree::Sample(uint64_t seed, uint64_t counter, std::span<int64_t> indices,
                                std::span<double> values) const {
  PERSERVE_RETURN_IF_ERROR(latch_.Refusal());
  PERSERVE_RETURN_IF_ERROR(ValidateSampleBatch(indices, values, Total()));
  const int64_t count = static_cast<int64_t>(indices.size());
  if (count == 0) return Status::Ok();
  std::byte* h_out = nullptr;
  PERSERVE_RETURN_IF_ERROR(OnDevice(
      "sample", [&] { return ReserveStaging(count); },
      [&] {
        std::byte* d_out = staging_.device<std::byte>(kStagingOut);
        h_out = staging_.host<std::byte>(kStagingOut);
        kernels::Sample<<<Blocks(count), kThreads, 0, stream_>>>(d_nodes_, capacity_, levels_, seed, counter, count,
                                                                 At<int64_t>(d_out, 0), At<double>(d_out, count));
        return cuda::Check(cudaGetLastError(), "Sample launch");
      }));
  std::memcpy(indices.data(), At<int64_t>(h_out, 0), indices.size_bytes());
  std::memcpy(values.data(), At<double>(h_out, count), values.size_bytes());
  return Status::Ok();
}

Status CudaPriorityTree::Get(std::span<const int64_t> indices, std::span<double> values) const {
  PERSERVE_RETURN_IF_ERROR(latch_.Refusal());
  PERSERVE_RETURN_IF_ERROR(ValidateGetBatch(indices, values, capacity_));
  const int64_t count = static_cast<int64_t>(indices.size());
  if (count == 0) return Status::Ok();
  PERSERVE_RETURN_IF_ERROR(OnDevice(
      "get", [&] { return ReserveStaging(count); },
      [&] {
        std::memcpy(staging_.host<int64_t>(kStagingIn), indices.data(), indices.size_bytes());
        kernels::GatherLeaves<<<Blocks(count), kThreads, 0, stream_>>>(
            d_nodes_, capacity_, staging_.device<int64_t>(kStagingIn), count, staging_.device<double>(kStagingOut));
        return cuda::Check(cudaGetLastError(), "GatherLeaves launch");
      }));
  std::memcpy(values.data(), staging_.host<double>(kStagingOut), values.size_bytes());
  return Status::Ok();
}

Status CudaPriorityTree::ReadNodes(std::span<double> sums, std::span<double> mins) const {
  PERSERVE_RETURN_IF_ERROR(latch_.Refusal());
  PERSERVE_RETURN_IF_ERROR(ValidateNodeSpans(sums, mins, capacity_));
  std::vector<TreeNode> nodes(static_cast<size_t>(2 * capacity_));
  PERSERVE_RETURN_IF_ERROR(OnDevice(
      "reading nodes", [] { return Status::Ok(); },
      [&] {
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
