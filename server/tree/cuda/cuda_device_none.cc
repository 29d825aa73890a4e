#include "tree/cuda/cuda_device.h"

namespace perserve::tree {

int UsableCudaDeviceCount(std::string* why) {
  *why = "perserve was built without CUDA (no CUDA compiler at configure time, or PERSERVE_ENABLE_CUDA=OFF)";
  return 0;
}

}  // namespace perserve::tree
