// AssemblyPool: threads that assemble a sample's items into its reply with
// the service loop's thread, which waits for them (ParallelFor returns once
// every part is done). The loop stays the one owner of the replay's state:
// nothing changes it while a ParallelFor runs, so the workers only read steps
// and rows that cannot be overwritten while they copy.
//
// ParallelFor(n, body) splits [0, n) into about 4 parts per thread and runs
// body(begin, end) on every part, the caller's thread taking parts too; with
// one thread (or none) it is a plain call. Workers sleep on a condition
// variable between calls. Not reentrant; one caller at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace perserve::replay {

class AssemblyPool {
 public:
  // `threads` >= 1 in all, the caller's included (threads - 1 workers).
  explicit AssemblyPool(int threads);
  ~AssemblyPool();
  AssemblyPool(const AssemblyPool&) = delete;
  AssemblyPool& operator=(const AssemblyPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  void ParallelFor(int64_t count, const std::function<void(int64_t begin, int64_t end)>& body);

  // The cores this process may run on (sched_getaffinity), at least 1.
  static int UsableCores();

 private:
  void Work();
  // Takes and runs parts of the current call until none is left.
  void RunParts();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t count_ = 0, part_size_ = 1, next_part_ = 0, parts_ = 0, parts_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace perserve::replay
