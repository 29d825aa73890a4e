// AnyPageResident: whether memory was ever touched, for the tests that check
// a store's memory grows with what it holds, not with its capacity.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace perserve::replay::replay_test {

// Whether any page of [begin, end) is resident (mincore), the range narrowed
// to whole pages.
inline bool AnyPageResident(const std::byte* begin, const std::byte* end) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t from = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t to = reinterpret_cast<uintptr_t>(end) / page * page;
  if (to <= from) return false;
  std::vector<unsigned char> resident((to - from) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(from), to - from, resident.data()), 0);
  return std::any_of(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) != 0; });
}

}  // namespace perserve::replay::replay_test
