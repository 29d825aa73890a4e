#include "tree/cuda/operation_latch.h"

namespace perserve::cuda {

Status OperationLatch::Refusal() const {
  if (failure_.empty()) return Status::Ok();
  return Status::Internal("the CUDA tree is unusable after a CUDA error: " + failure_);
}

void OperationLatch::Close(const Status& cause) {
  if (failure_.empty() && !cause.ok()) failure_ = cause.ToString();
}

}  // namespace perserve::cuda
