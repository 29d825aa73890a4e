// GrowingBuffers: the growth policy of the CUDA tree's staging and sort
// buffers and the CUDA scan's scratch, on a stand-in allocator (no GPU).
#include "tree/cuda/growing_buffers.h"

#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "server/tree/fake_device_allocator.h"

namespace perserve::cuda {
namespace {

using testing::FakeDeviceAllocator;

// Two buffers, as the tree's staging: 16 and 8 bytes an element.
GrowingBuffers MakeStaging(FakeDeviceAllocator* allocator) {
  return GrowingBuffers(allocator, {{MemoryKind::kMappedWriteCombined, 16}, {MemoryKind::kDevice, 8}});
}

TEST(GrowingBuffersTest, DoublesAndNeverShrinks) {
  FakeDeviceAllocator allocator;
  {
    GrowingBuffers buffers = MakeStaging(&allocator);
    EXPECT_TRUE(buffers.Reserve(0).ok());
    EXPECT_TRUE(allocator.requests().empty());
    ASSERT_TRUE(buffers.Reserve(10).ok());
    EXPECT_EQ(buffers.reserved(), 10);
    ASSERT_TRUE(buffers.Reserve(11).ok());
    EXPECT_EQ(buffers.reserved(), 20);  // doubled: a growing batch size allocates O(log) times
    ASSERT_TRUE(buffers.Reserve(15).ok());
    EXPECT_EQ(buffers.reserved(), 20);  // fits: nothing allocated
    EXPECT_EQ(allocator.requests().size(), 4u);
    ASSERT_TRUE(buffers.Reserve(100).ok());
    EXPECT_EQ(buffers.reserved(), 100);  // the request itself when larger than double
    EXPECT_EQ(allocator.live_allocations(), 2u);  // the old pair was freed
    EXPECT_EQ(allocator.live_bytes(), 100u * 16 + 100u * 8);
    EXPECT_NE(buffers.host<void>(0), nullptr);  // mapped: a host address
    EXPECT_EQ(buffers.host<void>(1), nullptr);  // device memory: none
    EXPECT_NE(buffers.device<void>(1), nullptr);
  }
  EXPECT_EQ(allocator.live_allocations(), 0u);  // the destructor frees everything
  EXPECT_EQ(allocator.bad_frees(), 0);
}

TEST(GrowingBuffersTest, FallsBackToTheExactRequestWhenDoublingDoesNotFit) {
  FakeDeviceAllocator allocator;
  GrowingBuffers buffers = MakeStaging(&allocator);
  ASSERT_TRUE(buffers.Reserve(1000).ok());
  // 1000 elements are live (24 000 bytes); 1500 more fit beside them, 2000 do not.
  allocator.set_budget_bytes(1000 * 24 + 1500 * 24);
  ASSERT_TRUE(buffers.Reserve(1500).ok());
  EXPECT_EQ(buffers.reserved(), 1500);
  EXPECT_EQ(allocator.live_bytes(), 1500u * 24);
}

TEST(GrowingBuffersTest, ARequestThatDoesNotFitLeavesTheBuffersAsTheyWere) {
  FakeDeviceAllocator allocator;
  GrowingBuffers buffers = MakeStaging(&allocator);
  ASSERT_TRUE(buffers.Reserve(64).ok());
  void* const host = buffers.host<void>(0);
  void* const device = buffers.device<void>(1);
  // Room for the first new buffer but not the second: the first must be given back.
  allocator.set_budget_bytes(64 * 24 + 4096 * 16 + 100);
  const Status status = buffers.Reserve(4096);
  EXPECT_EQ(status.code(), Status::Code::kResourceExhausted) << status.ToString();
  EXPECT_EQ(buffers.reserved(), 64);
  EXPECT_EQ(buffers.host<void>(0), host);
  EXPECT_EQ(buffers.device<void>(1), device);
  EXPECT_EQ(allocator.live_allocations(), 2u);
  EXPECT_EQ(allocator.live_bytes(), 64u * 24);
  // Still usable for a request that fits.
  allocator.set_budget_bytes(std::numeric_limits<size_t>::max());
  EXPECT_TRUE(buffers.Reserve(64).ok());
  EXPECT_TRUE(buffers.Reserve(100).ok());
  EXPECT_EQ(buffers.reserved(), 128);
  EXPECT_EQ(allocator.bad_frees(), 0);
}

TEST(GrowingBuffersTest, OtherErrorsAreReturnedWithoutARetry) {
  FakeDeviceAllocator allocator;
  GrowingBuffers buffers = MakeStaging(&allocator);
  ASSERT_TRUE(buffers.Reserve(8).ok());
  const size_t before = allocator.requests().size();
  allocator.FailNext(Status::Internal("fake: context lost"));
  const Status status = buffers.Reserve(9);
  EXPECT_EQ(status.code(), Status::Code::kInternal);
  EXPECT_EQ(allocator.requests().size(), before + 1);  // not retried at the exact size
  EXPECT_EQ(buffers.reserved(), 8);
}

TEST(GrowingBuffersTest, ASizeThatWouldOverflowIsResourceExhaustedWithoutAllocating) {
  FakeDeviceAllocator allocator;
  GrowingBuffers buffers = MakeStaging(&allocator);
  const Status status = buffers.Reserve(std::numeric_limits<int64_t>::max() / 4);
  EXPECT_EQ(status.code(), Status::Code::kResourceExhausted) << status.ToString();
  EXPECT_TRUE(allocator.requests().empty());
  EXPECT_EQ(buffers.reserved(), 0);
}

TEST(GrowingBuffersTest, ReleaseFreesEverything) {
  FakeDeviceAllocator allocator;
  GrowingBuffers buffers = MakeStaging(&allocator);
  ASSERT_TRUE(buffers.Reserve(5).ok());
  buffers.Release();
  EXPECT_EQ(buffers.reserved(), 0);
  EXPECT_EQ(buffers.host<void>(0), nullptr);
  EXPECT_EQ(allocator.live_allocations(), 0u);
  ASSERT_TRUE(buffers.Reserve(3).ok());
  EXPECT_EQ(buffers.reserved(), 3);
}

}  // namespace
}  // namespace perserve::cuda
