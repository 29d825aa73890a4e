#include "tree/cuda/cuda_device.h"

#include <cuda_runtime.h>

namespace perserve::tree {

int UsableCudaDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later CUDA calls start clean
    *why = std::string("no usable CUDA device (") + cudaGetErrorString(error) + ")";
    return 0;
  }
  if (count == 0) *why = "no CUDA device found";
  return count;
}

}  // namespace perserve::tree
