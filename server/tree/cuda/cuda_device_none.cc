#include "tree/cuda/cuda_device.h"

#include "tree/priority_tree.h"

namespace perserve::tree {

int UsableCudaDeviceCount(std::string* why) {
  *why = "perserve was built without CUDA (no CUDA compiler at configure time, or PERSERVE_ENABLE_CUDA=OFF)";
  return 0;
}

Status CreateCudaPriorityTree(int64_t, std::unique_ptr<PriorityTree>*) {
  return Status::Unavailable("perserve was built without CUDA");
}

}  // namespace perserve::tree
