// A test hook in the one place CUDA errors become Status values (cuda::Check,
// cuda_check.h): it makes a chosen checked CUDA call report an error, so tests
// can drive the error paths of the CUDA tree and scan (an allocation that runs
// out of memory, a launch that fails) on demand. Plain C++: host tests reach it
// without nvcc, and it costs one relaxed atomic increment per checked call.
//
// Thread safety: the hook is process-wide and safe to call from any thread;
// a test that arms it should not run CUDA work on other threads meanwhile.
#pragma once

#include <cstdint>
#include <string>

namespace perserve::cuda {

// Makes the `nth` (1 = the next) checked call from now on whose description
// (cuda::Check's `what`, e.g. "cudaHostAlloc (mapped)") contains
// `call_contains` (empty: any call) report `error`, a cudaError_t value, in
// place of what it returned. Fires once; arming again replaces the last arming.
void InjectFailure(int error, std::string call_contains = "", int64_t nth = 1);

// Disarms the hook (a no-op when it already fired or was never armed).
void ClearInjectedFailure();

// Whether an armed failure is still waiting for its call.
bool FailureArmed();

// How many calls cuda::Check has checked in this process.
int64_t CheckedCalls();

// cuda::Check's side: counts the call and returns `error`, or the injected
// error when this is the chosen call.
int InjectedError(int error, const char* what);

}  // namespace perserve::cuda
