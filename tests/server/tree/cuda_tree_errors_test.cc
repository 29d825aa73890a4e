// The CUDA tree's error paths: the latch is asked first, memory that cannot
// be had leaves the tree usable, an error after work was queued does not,
// and the tree works from any thread whatever device it has selected.
//
// CudaCheckTest and CudaTreeLatchTest run everywhere CUDA is built (no GPU
// needed); TreeWithoutDeviceTest only where no device is usable (it launches
// kernels on a tree without device memory, which fail there and only there);
// CudaTreeErrorsTest and CudaScanWorkspaceTest need a GPU (scripts/gpu-check.sh)
// and make real CUDA calls fail through cuda::Check's injection hook.
#if PERSERVE_HAVE_CUDA

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "scan/episodic_prefix_sum.h"
#include "server/tree/fake_device_allocator.h"
#include "server/tree/tree_test_util.h"
#include "tree/cuda/cuda_check.h"
#include "tree/cuda/cuda_failure_injection.h"
#include "tree/cuda/cuda_priority_tree.h"

namespace perserve::tree {
namespace {

// Disarms the injection hook however a test ends.
struct DisarmAfter {
  ~DisarmAfter() { cuda::ClearInjectedFailure(); }
};

::testing::AssertionResult Refused(const Status& status) {
  if (status.code() == Status::Code::kInternal && status.message().find("unusable") != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "not refused by the latch: " << status.ToString();
}

// ---- Everywhere CUDA is built

TEST(CudaCheckTest, OutOfMemoryIsResourceExhaustedAndTheRestInternal) {
  EXPECT_TRUE(cuda::Check(cudaSuccess, "a call").ok());
  EXPECT_EQ(cuda::Check(cudaErrorMemoryAllocation, "cudaMalloc").code(), Status::Code::kResourceExhausted);
  const Status launch = cuda::Check(cudaErrorLaunchFailure, "SmallBatch launch");
  EXPECT_EQ(launch.code(), Status::Code::kInternal);
  EXPECT_NE(launch.message().find("SmallBatch launch"), std::string::npos) << launch.ToString();
}

TEST(CudaCheckTest, TheInjectedFailureHitsTheNthMatchingCallOnce) {
  DisarmAfter disarm;
  const int64_t before = cuda::CheckedCalls();
  cuda::InjectFailure(cudaErrorMemoryAllocation, "cudaHostAlloc", 2);
  EXPECT_TRUE(cuda::Check(cudaSuccess, "cudaMalloc (device buffer)").ok());     // does not match
  EXPECT_TRUE(cuda::Check(cudaSuccess, "cudaHostAlloc (mapped buffer)").ok());  // first match
  EXPECT_TRUE(cuda::FailureArmed());
  const Status injected = cuda::Check(cudaSuccess, "cudaHostAlloc (mapped buffer)");  // second: fails
  EXPECT_EQ(injected.code(), Status::Code::kResourceExhausted) << injected.ToString();
  EXPECT_FALSE(cuda::FailureArmed());
  EXPECT_TRUE(cuda::Check(cudaSuccess, "cudaHostAlloc (mapped buffer)").ok());  // once only
  EXPECT_EQ(cuda::CheckedCalls() - before, 4);
  cuda::InjectFailure(cudaErrorLaunchFailure);  // any call
  EXPECT_EQ(cuda::Check(cudaSuccess, "anything").code(), Status::Code::kInternal);
}

// A tree whose latch is closed answers every call with its error before it
// validates, resolves "auto" (which may build a scratch tree and calibrate)
// or reads its root: no CUDA call at all, and NaN for the total and minimum.
TEST(CudaTreeLatchTest, AFailedTreeRefusesEveryCallFirst) {
  std::unique_ptr<CudaPriorityTree> cuda_tree = CudaPriorityTree::CreateWithoutDeviceForTesting(1024, nullptr);
  cuda_tree->SetStrategy(UpdateStrategy::kAuto);
  cuda_tree->CloseLatchForTesting(Status::Internal("Descend launch failed: an illegal memory access"));
  const PriorityTree& tree = *cuda_tree;
  const int64_t calls = cuda::CheckedCalls();

  // Inputs that validation would reject (sizes differ, total "0"): the
  // latch's error must win.
  const std::vector<int64_t> indices = {1, 2};
  std::vector<double> one_value(1);
  EXPECT_TRUE(Refused(cuda_tree->Update(indices, one_value)));
  EXPECT_TRUE(Refused(cuda_tree->UpdateWithExponent(indices, one_value, 0.5)));
  std::vector<int64_t> leaves(2);
  EXPECT_TRUE(Refused(tree.FindPrefixSum(one_value, leaves)));
  std::vector<double> values(3);
  EXPECT_TRUE(Refused(tree.Sample(1, 2, leaves, values)));
  EXPECT_TRUE(Refused(tree.Get(indices, one_value)));
  std::vector<double> sums(3), mins(3);
  EXPECT_TRUE(Refused(tree.ReadNodes(sums, mins)));
  const Status refused = tree.Get(indices, one_value);
  EXPECT_NE(refused.message().find("illegal memory access"), std::string::npos) << refused.ToString();

  EXPECT_TRUE(std::isnan(tree.Total()));
  EXPECT_TRUE(std::isnan(tree.Min()));
  cuda_tree->PrepareAuto();
  EXPECT_NE(cuda_tree->DescribeAutoTable().find("unusable"), std::string::npos);
  EXPECT_EQ(cuda::CheckedCalls(), calls) << "a failed tree made CUDA calls";
}

// ---- Only where no device is usable: launches fail, as a lost context's would

TEST(TreeWithoutDeviceTest, MemoryShortBeforeQueueingIsReturnedAndAFailureAfterItLatches) {
  std::string why;
  if (UsableCudaDeviceCount(&why) > 0) {
    GTEST_SKIP() << "needs launches to fail (no device); CudaTreeErrorsTest covers this on a GPU";
  }
  cuda::testing::FakeDeviceAllocator allocator;
  allocator.set_budget_bytes(0);
  std::unique_ptr<CudaPriorityTree> tree = CudaPriorityTree::CreateWithoutDeviceForTesting(1024, &allocator);
  const std::vector<int64_t> indices(10, 3);
  std::vector<double> values(10);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const Status status = tree->Get(indices, values);
    EXPECT_EQ(status.code(), Status::Code::kResourceExhausted) << status.ToString();
    EXPECT_FALSE(tree->failed());
  }
  EXPECT_EQ(allocator.live_allocations(), 0u);

  allocator.set_budget_bytes(size_t{1} << 30);
  const Status launched = tree->Get(indices, values);  // staging grows; the launch fails
  EXPECT_EQ(launched.code(), Status::Code::kInternal) << launched.ToString();
  EXPECT_FALSE(Refused(launched)) << "the first failure should name itself";
  EXPECT_TRUE(tree->failed());
  EXPECT_TRUE(std::isnan(tree->Total()));
  const size_t requests = allocator.requests().size();
  EXPECT_TRUE(Refused(tree->Get(indices, values)));
  EXPECT_EQ(allocator.requests().size(), requests);
}

// ---- On a GPU

class CudaTreeErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override { PERSERVE_SKIP_IF_UNUSABLE(Device::kCuda); }

  static std::unique_ptr<CudaPriorityTree> MakeCudaTree(int64_t capacity) {
    std::unique_ptr<CudaPriorityTree> tree;
    const Status status = CudaPriorityTree::Create(capacity, &tree);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return tree;
  }

  static testing::Batch Batch(int64_t size, int64_t capacity, uint64_t seed) {
    std::mt19937_64 rng(seed);
    testing::Batch batch;
    for (int64_t j = 0; j < size; ++j) {
      batch.indices.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(capacity)));
      batch.values.push_back(1.0 + static_cast<double>(rng() % 1000));
    }
    return batch;
  }

  // The update must fail with kResourceExhausted and change nothing; then it
  // must succeed, and the tree match a CPU tree given the same batches.
  static void ExpectOutOfMemorySurvived(int64_t capacity, int64_t batch_size, const char* call, int64_t nth) {
    DisarmAfter disarm;
    std::unique_ptr<CudaPriorityTree> tree = MakeCudaTree(capacity);
    ASSERT_NE(tree, nullptr);
    tree->SetStrategy(UpdateStrategy::kSparse);
    std::unique_ptr<PriorityTree> cpu = testing::MakeTree(capacity, UpdateStrategy::kSparse, Device::kCpu);
    const testing::Batch first = Batch(500, capacity, 1);
    ASSERT_TRUE(tree->Update(first.indices, first.values).ok());
    ASSERT_TRUE(cpu->Update(first.indices, first.values).ok());
    const double total = tree->Total();

    const testing::Batch big = Batch(batch_size, capacity, 2);
    cuda::InjectFailure(cudaErrorMemoryAllocation, call, nth);
    const Status status = tree->Update(big.indices, big.values);
    EXPECT_EQ(status.code(), Status::Code::kResourceExhausted) << status.ToString();
    EXPECT_FALSE(cuda::FailureArmed()) << "the injected call was never made";
    EXPECT_FALSE(tree->failed());
    EXPECT_EQ(tree->Total(), total);

    const Status retried = tree->Update(big.indices, big.values);
    ASSERT_TRUE(retried.ok()) << retried.ToString();
    ASSERT_TRUE(cpu->Update(big.indices, big.values).ok());
    std::vector<double> sums(2 * capacity), mins(2 * capacity), cpu_sums(2 * capacity), cpu_mins(2 * capacity);
    ASSERT_TRUE(tree->ReadNodes(sums, mins).ok());
    ASSERT_TRUE(cpu->ReadNodes(cpu_sums, cpu_mins).ok());
    EXPECT_EQ(0, std::memcmp(sums.data(), cpu_sums.data(), sums.size() * sizeof(double)));
    EXPECT_EQ(0, std::memcmp(mins.data(), cpu_mins.data(), mins.size() * sizeof(double)));
  }
};

TEST_F(CudaTreeErrorsTest, OutOfPinnedMemoryGrowingStagingLeavesTheTreeUsable) {
  // 200 000 > twice the initial staging (2^16): one attempt, at the exact size.
  ExpectOutOfMemorySurvived(4096, 200000, "cudaHostAlloc", 1);
}

TEST_F(CudaTreeErrorsTest, OutOfDeviceMemoryForTheSortLeavesTheTreeUsable) {
  ExpectOutOfMemorySurvived(4096, 5000, "cudaMalloc", 1);  // the sort's first buffer
  ExpectOutOfMemorySurvived(4096, 5000, "cudaMalloc", 5);  // its temporary storage
}

TEST_F(CudaTreeErrorsTest, AFailureAfterWorkWasQueuedLatches) {
  DisarmAfter disarm;
  std::unique_ptr<CudaPriorityTree> tree = MakeCudaTree(1024);
  ASSERT_NE(tree, nullptr);
  // Not "auto": its first update calibrates on a scratch tree, whose
  // SmallBatch launch would take the injected failure instead (seen on the
  // first GPU run: the update succeeded and nothing latched).
  tree->SetStrategy(UpdateStrategy::kSparse);
  const testing::Batch batch = Batch(100, 1024, 3);
  cuda::InjectFailure(cudaErrorLaunchFailure, "SmallBatch launch");
  const Status status = tree->Update(batch.indices, batch.values);
  EXPECT_EQ(status.code(), Status::Code::kInternal) << status.ToString();
  EXPECT_TRUE(tree->failed());
  EXPECT_TRUE(std::isnan(tree->Total()));
  std::vector<double> values(batch.indices.size());
  EXPECT_TRUE(Refused(tree->Get(batch.indices, values)));
}

TEST_F(CudaTreeErrorsTest, NothingAllocatesOnceTheBuffersHaveGrown) {
  DisarmAfter disarm;
  std::unique_ptr<CudaPriorityTree> tree = MakeCudaTree(1 << 14);
  ASSERT_NE(tree, nullptr);
  tree->SetStrategy(UpdateStrategy::kSparse);
  const testing::Batch batch = Batch(10000, 1 << 14, 4);
  ASSERT_TRUE(tree->Update(batch.indices, batch.values).ok());
  cuda::InjectFailure(cudaErrorMemoryAllocation, "lloc");  // any cudaMalloc or cudaHostAlloc
  ASSERT_TRUE(tree->Update(batch.indices, batch.values).ok());
  std::vector<int64_t> leaves(4096);
  std::vector<double> values(4096);
  ASSERT_TRUE(tree->Sample(7, 0, leaves, values).ok());
  EXPECT_TRUE(cuda::FailureArmed()) << "an update or sample of a size seen before allocated";
}

// The tree makes its own device current for each call and gives the
// caller's back: from a thread that selected another device (where there
// are two), or a fresh thread (where there is one).
TEST_F(CudaTreeErrorsTest, WorksFromAnyThreadAndLeavesItsDeviceAlone) {
  std::unique_ptr<CudaPriorityTree> tree = MakeCudaTree(1024);
  ASSERT_NE(tree, nullptr);
  tree->SetStrategy(UpdateStrategy::kSparse);
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  const int other = devices > 1 ? 1 : 0;
  Status status;
  int device_after = -1;
  std::thread caller([&] {
    if (cudaSetDevice(other) != cudaSuccess) return;
    const testing::Batch batch = Batch(3000, 1024, 5);
    status = tree->Update(batch.indices, batch.values);
    std::vector<int64_t> leaves(64);
    std::vector<double> values(64);
    if (status.ok()) status = tree->Sample(1, 1, leaves, values);
    cudaGetDevice(&device_after);
  });
  caller.join();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(device_after, other);
  EXPECT_FALSE(tree->failed());
}

class CudaScanWorkspaceTest : public ::testing::Test {
 protected:
  void SetUp() override { PERSERVE_SKIP_IF_UNUSABLE(Device::kCuda); }
};

TEST_F(CudaScanWorkspaceTest, ReusesItsBuffersAndSurvivesMemoryRunningOut) {
  DisarmAfter disarm;
  std::unique_ptr<scan::CudaScanWorkspace> workspace;
  ASSERT_TRUE(scan::CudaScanWorkspace::Create(&workspace).ok());
  auto run = [&](int64_t streams, int64_t length) {
    std::vector<double> x(streams * length, 1.0), out(streams * length), carry(streams, 0.0);
    std::vector<uint8_t> dones(streams * length, 0), carry_done(streams, 0);
    const Status status = scan::EpisodicPrefixSumCuda(
        scan::ScanArrays<double>{x, dones, streams, length, carry, carry_done, out}, scan::Boundary::kEndsAt,
        workspace.get());
    if (status.ok()) {
      EXPECT_EQ(out.back(), static_cast<double>(length));
    }
    return status;
  };
  ASSERT_TRUE(run(8, 5000).ok());
  cuda::InjectFailure(cudaErrorMemoryAllocation, "cudaMalloc");
  ASSERT_TRUE(run(8, 5000).ok());
  ASSERT_TRUE(run(4, 100).ok());
  EXPECT_TRUE(cuda::FailureArmed()) << "a scan no larger than an earlier one allocated";
  const Status grown = run(64, 5000);  // must grow: the injected failure hits
  EXPECT_EQ(grown.code(), Status::Code::kResourceExhausted) << grown.ToString();
  EXPECT_TRUE(run(8, 5000).ok());  // the workspace is still good
  EXPECT_TRUE(run(64, 5000).ok());
}

}  // namespace
}  // namespace perserve::tree

#endif  // PERSERVE_HAVE_CUDA
