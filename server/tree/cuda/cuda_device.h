// Whether this process can use a CUDA device. Plain C++: callable from code
// that g++ compiles whether or not the build has CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "perserve/status.h"

namespace perserve::tree {

// The number of usable CUDA devices. Returns 0 and says why in `why` where
// there is none: a build without CUDA, no driver, or a driver too old for this
// runtime ("driver insufficient", as on machines without a GPU), all of which
// mean "no device" rather than an error.
int UsableCudaDeviceCount(std::string* why);

class PriorityTree;

// A CudaPriorityTree of `capacity` leaves (a power of two) on the current
// device; kUnavailable in a build without CUDA, an error status from CUDA
// (e.g. out of device memory) otherwise.
Status CreateCudaPriorityTree(int64_t capacity, std::unique_ptr<PriorityTree>* tree);

}  // namespace perserve::tree
