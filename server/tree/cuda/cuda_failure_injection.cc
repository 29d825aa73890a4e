#include "tree/cuda/cuda_failure_injection.h"

#include <atomic>
#include <mutex>
#include <string_view>

namespace perserve::cuda {
namespace {

std::atomic<int64_t> checked_calls{0};
std::atomic<bool> armed{false};  // read on every call; the rest only while armed
std::mutex mutex;
std::string wanted_call;
int64_t matches_left = 0;
int injected_error = 0;

}  // namespace

void InjectFailure(int error, std::string call_contains, int64_t nth) {
  std::lock_guard<std::mutex> lock(mutex);
  wanted_call = std::move(call_contains);
  matches_left = nth;
  injected_error = error;
  armed.store(nth > 0, std::memory_order_release);
}

void ClearInjectedFailure() {
  std::lock_guard<std::mutex> lock(mutex);
  matches_left = 0;
  armed.store(false, std::memory_order_release);
}

bool FailureArmed() { return armed.load(std::memory_order_acquire); }

int64_t CheckedCalls() { return checked_calls.load(std::memory_order_relaxed); }

int InjectedError(int error, const char* what) {
  checked_calls.fetch_add(1, std::memory_order_relaxed);
  if (!armed.load(std::memory_order_acquire)) return error;
  std::lock_guard<std::mutex> lock(mutex);
  if (matches_left <= 0 || std::string_view(what).find(wanted_call) == std::string_view::npos) return error;
  if (--matches_left > 0) return error;
  armed.store(false, std::memory_order_release);
  return injected_error;
}

}  // namespace perserve::cuda
