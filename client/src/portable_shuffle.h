// Draws on std::mt19937_64 that are the same under every standard library
// (internal to the client library). The engine's outputs are fixed by the
// standard; std::uniform_int_distribution's and std::shuffle's use of them
// is not: libc++ permutes a batch otherwise than libstdc++ from the same
// engine, so the deterministic simulation's schedules over shards differed
// between the libraries (issue 35). These are libstdc++'s algorithms (GCC 11
// to 14) written out, so every seed keeps the permutation it had there and
// has the same one everywhere; PortableShuffleTest checks them against
// std::'s when built against libstdc++, and pins a few for the others.
// (tests/server/service/simulation/portable_random.h holds the simulation's
// own draws, the same integer algorithm.)
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace perserve::client_internal {

// Uniform in [0, size), size >= 1, from one output (rarely more): Lemire's
// nearly divisionless method on the 128-bit product of an output and size,
// as libstdc++'s std::uniform_int_distribution<uint64_t>(0, size - 1) on a
// 64-bit engine.
inline uint64_t PortableBelow(std::mt19937_64* engine, uint64_t size) {
  unsigned __int128 product = static_cast<unsigned __int128>((*engine)()) * size;
  if (static_cast<uint64_t>(product) < size) {
    const uint64_t threshold = (0 - size) % size;  // 2^64 mod size: the outputs' biased tail
    while (static_cast<uint64_t>(product) < threshold) product = static_cast<unsigned __int128>((*engine)()) * size;
  }
  return static_cast<uint64_t>(product >> 64);
}

// Fisher-Yates as libstdc++'s std::shuffle(values.begin(), values.end(),
// *engine): while the engine's range holds size^2, positions i and i + 1 take
// their swap partners from one draw in [0, (i + 1)(i + 2)) (after a first
// single swap when the size is even); beyond, one draw each. O(size).
template <typename T>
void PortableShuffle(std::span<T> values, std::mt19937_64* engine) {
  const uint64_t size = values.size();
  if (size == 0) return;
  uint64_t i = 1;
  if (UINT64_MAX / size >= size) {
    if (size % 2 == 0) {
      std::swap(values[i], values[PortableBelow(engine, 2)]);
      ++i;
    }
    while (i != size) {
      const uint64_t first_range = i + 1;  // i's partner in [0, i], then i + 1's in [0, i + 1]
      const uint64_t both = PortableBelow(engine, first_range * (first_range + 1));
      std::swap(values[i], values[both / (first_range + 1)]);
      ++i;
      std::swap(values[i], values[both % (first_range + 1)]);
      ++i;
    }
    return;
  }
  for (; i != size; ++i) std::swap(values[i], values[PortableBelow(engine, i + 1)]);
}

}  // namespace perserve::client_internal
