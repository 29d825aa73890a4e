// The process's resident set size, for the stats lines and the memory-bound
// tests: Linux's /proc/self/statm (pages), 0 where it cannot be read.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>

namespace perserve::service {

inline int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace perserve::service
