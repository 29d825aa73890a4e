#include "server/service/simulation/fiber.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define PERSERVE_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PERSERVE_FIBER_ASAN 1
#endif
#endif

#if defined(PERSERVE_FIBER_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace perserve::service::simulation {
namespace {

// The fiber makecontext starts next (its entry takes no pointer argument portably).
thread_local Fiber* starting = nullptr;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fiber: %s\n", what);
  std::abort();
}

void StartSwitch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const void* bottom,
                 [[maybe_unused]] size_t bytes) {
#if defined(PERSERVE_FIBER_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, bytes);
#endif
}

void FinishSwitch([[maybe_unused]] void* fake_stack, [[maybe_unused]] const void** bottom_old,
                  [[maybe_unused]] size_t* bytes_old) {
#if defined(PERSERVE_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, bytes_old);
#endif
}

}  // namespace

Fiber::Fiber(std::function<void()> body, size_t stack_bytes)
    : body_(std::move(body)), stack_bytes_(stack_bytes), stack_(new char[stack_bytes]) {}

Fiber::~Fiber() {
  if (started_ && !finished_) Die("destroyed while its body is suspended");
}

void Fiber::Entry() {
  Fiber* self = std::exchange(starting, nullptr);
  FinishSwitch(nullptr, &self->caller_stack_, &self->caller_stack_bytes_);
  try {
    self->body_();
  } catch (...) {
    self->escaped_ = std::current_exception();
  }
  self->finished_ = true;
  self->SwitchToCaller(/*for_good=*/true);
  Die("resumed after its body returned");
}

void Fiber::Resume() {
  if (finished_ || running_) Die(finished_ ? "resumed after its body returned" : "resumed from itself");
  if (!started_) {
    started_ = true;
    if (::getcontext(&context_) != 0) Die("getcontext failed");
    context_.uc_stack.ss_sp = stack_.get();
    context_.uc_stack.ss_size = stack_bytes_;
    context_.uc_link = nullptr;
    ::makecontext(&context_, &Fiber::Entry, 0);
    starting = this;
  }
  running_ = true;
  void* fake_stack = nullptr;
  StartSwitch(&fake_stack, stack_.get(), stack_bytes_);
  if (::swapcontext(&caller_, &context_) != 0) Die("swapcontext failed");
  FinishSwitch(fake_stack, nullptr, nullptr);
  running_ = false;
  if (escaped_) std::rethrow_exception(std::exchange(escaped_, nullptr));
}

void Fiber::Yield() {
  if (!running_) Die("yielded from outside its body");
  SwitchToCaller(/*for_good=*/false);
  FinishSwitch(fake_stack_, &caller_stack_, &caller_stack_bytes_);
}

void Fiber::SwitchToCaller(bool for_good) {
  // With for_good, AddressSanitizer frees this stack's fake frames (nullptr).
  StartSwitch(for_good ? nullptr : &fake_stack_, caller_stack_, caller_stack_bytes_);
  if (::swapcontext(&context_, &caller_) != 0) Die("swapcontext failed");
}

}  // namespace perserve::service::simulation
