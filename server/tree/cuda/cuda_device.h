// Whether this process can use a CUDA device. Plain C++: callable from code
// that g++ compiles whether or not the build has CUDA.
#pragma once

#include <string>

namespace perserve::tree {

// The number of usable CUDA devices. Returns 0 and says why in `why` where
// there is none: a build without CUDA, no driver, or a driver too old for this
// runtime ("driver insufficient", as on machines without a GPU), all of which
// mean "no device" rather than an error.
int UsableCudaDeviceCount(std::string* why);

}  // namespace perserve::tree
