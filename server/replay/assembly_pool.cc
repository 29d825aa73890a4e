#include "replay/assembly_pool.h"

#include <sched.h>

#include <algorithm>

namespace perserve::replay {

AssemblyPool::AssemblyPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Work(); });
}

AssemblyPool::~AssemblyPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

int AssemblyPool::UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

void AssemblyPool::RunParts() {
  std::unique_lock lock(mutex_);
  while (body_ != nullptr && next_part_ < parts_) {
    const int64_t part = next_part_++;
    const std::function<void(int64_t, int64_t)>& body = *body_;
    const int64_t begin = part * part_size_, end = std::min(count_, begin + part_size_);
    lock.unlock();
    body(begin, end);
    lock.lock();
    if (++parts_done_ == parts_) done_.notify_all();
  }
}

void AssemblyPool::Work() {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    RunParts();
    lock.lock();
  }
}

void AssemblyPool::ParallelFor(int64_t count, const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1) return body(0, count);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    count_ = count;
    const int64_t wanted = std::min<int64_t>(count, 4 * threads());
    part_size_ = (count + wanted - 1) / wanted;
    parts_ = (count + part_size_ - 1) / part_size_;
    next_part_ = 0;
    parts_done_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  RunParts();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return parts_done_ == parts_; });
  body_ = nullptr;
}

}  // namespace perserve::replay
