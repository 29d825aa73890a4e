// Fiber: a function with its own stack that the simulation runs in turns
// with its scheduler, on the scheduler's thread: Resume() runs it until it
// calls Yield() (or returns), Yield() goes back to Resume()'s caller. The
// simulation runs each client of the real client library in one, so that a
// library call that blocks (a learner's Sample waiting for its replies)
// hands the turn back and the scheduler runs ticks (other clients act, the
// services step) until what it waits for has come. Only one side runs at a
// time, so everything stays decided by the seed alone.
//
// ucontext (makecontext/swapcontext), with AddressSanitizer told of every
// switch. An exception that leaves the function is caught on its own stack
// and rethrown by Resume(). Never switch inside a catch block (the C++
// runtime's exception state is per thread, not per fiber).
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>

namespace perserve::service::simulation {

class Fiber {
 public:
  explicit Fiber(std::function<void()> body, size_t stack_bytes = size_t{512} << 10);
  // The body must have returned (or never started): a fiber's stack is not unwound here.
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // From the scheduler: runs the body until it yields or returns; rethrows
  // what escaped the body.
  void Resume();
  // From the body: back to Resume()'s caller, until the next Resume().
  void Yield();
  bool started() const { return started_; }
  bool finished() const { return finished_; }

 private:
  static void Entry();
  void SwitchToCaller(bool for_good);

  std::function<void()> body_;
  size_t stack_bytes_;
  std::unique_ptr<char[]> stack_;
  ucontext_t context_{};
  ucontext_t caller_{};
  bool started_ = false;
  bool finished_ = false;
  bool running_ = false;
  std::exception_ptr escaped_;
  // AddressSanitizer's view of the stacks (unused without it).
  void* fake_stack_ = nullptr;
  const void* caller_stack_ = nullptr;
  size_t caller_stack_bytes_ = 0;
};

}  // namespace perserve::service::simulation
