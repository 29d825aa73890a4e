// OperationLatch: which errors the CUDA tree survives (no GPU needed).
#include "tree/cuda/operation_latch.h"

#include <string>

#include <gtest/gtest.h>

namespace perserve::cuda {
namespace {

struct Phases {
  std::string ran;  // the phases run, in order: p(repare), q(ueue), w(ait)
  Status prepare, queue, wait;
  Status Run(OperationLatch* latch) {
    return latch->Run([&] { ran += 'p'; return prepare; }, [&] { ran += 'q'; return queue; },
                      [&] { ran += 'w'; return wait; });
  }
};

TEST(OperationLatchTest, AnOperationThatSucceedsRunsEveryPhaseInOrder) {
  OperationLatch latch;
  Phases phases;
  EXPECT_TRUE(phases.Run(&latch).ok());
  EXPECT_EQ(phases.ran, "pqw");
  EXPECT_FALSE(latch.closed());
  EXPECT_TRUE(latch.Refusal().ok());
}

TEST(OperationLatchTest, AFailedPrepareIsReturnedAsItIsAndLeavesTheLatchOpen) {
  OperationLatch latch;
  Phases phases;
  phases.prepare = Status::ResourceExhausted("cudaHostAlloc (mapped buffer) failed: out of memory");
  const Status status = phases.Run(&latch);
  EXPECT_EQ(status.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(phases.ran, "p");  // nothing queued, so nothing to wait for
  EXPECT_FALSE(latch.closed());
  phases.prepare = Status::Ok();
  phases.ran.clear();
  EXPECT_TRUE(phases.Run(&latch).ok());  // the next operation runs normally
  EXPECT_EQ(phases.ran, "pqw");
}

TEST(OperationLatchTest, AFailedQueueStillWaitsAndClosesTheLatchForGood) {
  OperationLatch latch;
  Phases phases;
  phases.queue = Status::Internal("SmallBatch launch failed: unspecified launch failure");
  const Status status = phases.Run(&latch);
  EXPECT_EQ(status.code(), Status::Code::kInternal);
  EXPECT_EQ(phases.ran, "pqw");  // waited: nothing left running behind the error
  EXPECT_TRUE(latch.closed());

  Phases later;
  const Status refused = later.Run(&latch);
  EXPECT_EQ(refused.code(), Status::Code::kInternal);
  EXPECT_NE(refused.message().find("unusable"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("unspecified launch failure"), std::string::npos) << refused.ToString();
  EXPECT_EQ(later.ran, "");  // refused before doing anything
  EXPECT_EQ(latch.Refusal().ToString(), refused.ToString());
}

TEST(OperationLatchTest, AFailedWaitClosesTheLatch) {
  OperationLatch latch;
  Phases phases;
  phases.wait = Status::Internal("cudaStreamSynchronize failed: an illegal memory access was encountered");
  EXPECT_EQ(phases.Run(&latch).code(), Status::Code::kInternal);
  EXPECT_TRUE(latch.closed());
}

TEST(OperationLatchTest, AnAllocationFailureAfterWorkWasQueuedStillCloses) {
  // What matters is when, not what: memory running out once work is queued
  // may have left the tree half updated.
  OperationLatch latch;
  Phases phases;
  phases.queue = Status::ResourceExhausted("a launch ran out of memory");
  EXPECT_EQ(phases.Run(&latch).code(), Status::Code::kResourceExhausted);
  EXPECT_TRUE(latch.closed());
}

TEST(OperationLatchTest, TheFirstCauseIsKept) {
  OperationLatch latch;
  latch.Close(Status::Internal("first"));
  latch.Close(Status::Internal("second"));
  EXPECT_NE(latch.Refusal().message().find("first"), std::string::npos);
  EXPECT_EQ(latch.Refusal().message().find("second"), std::string::npos);
}

}  // namespace
}  // namespace perserve::cuda
