// The seeded streams of a Replay's Sample: the permutation a prioritized
// batch comes back in, and (for the selectors' draws) uniform fractions. Both
// are SplitMix64 streams keyed by (seed, the call's counter), so the same
// call always gives the same values, on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace perserve::replay {

inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// Keeps the shuffle's stream apart from the tree's masses, which use the same
// (seed, counter).
inline constexpr uint64_t kShuffleStream = 0x5f3c2b7a91d4e806ULL;
// The same for the fractions of a draw through a selector.
inline constexpr uint64_t kFractionStream = 0x2d8e6b1f4c97a053ULL;

// SplitMix64's output function: a bijective 64-bit mixer.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Fisher-Yates over `count` elements, swap(a, b) exchanging two of them,
// driven by a SplitMix64 stream keyed by (seed, counter): the same call
// always gives the same permutation. j is drawn uniformly from [0, i] by a
// 64x64 -> 128-bit multiply (no modulo bias).
template <typename Swap>
void ShuffleWith(uint64_t seed, uint64_t counter, size_t count, Swap swap) {
  uint64_t state = Mix(seed ^ kShuffleStream) + Mix(counter + kGolden);
  for (size_t i = count; i > 1; --i) {
    state += kGolden;
    const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(Mix(state)) * i) >> 64);
    swap(i - 1, j);
  }
}

// The shuffle of a prioritized batch: its slots and their leaf values together.
inline void Shuffle(uint64_t seed, uint64_t counter, std::span<int64_t> slots, std::span<double> leaves) {
  ShuffleWith(seed, counter, slots.size(), [slots, leaves](size_t a, size_t b) {
    std::swap(slots[a], slots[b]);
    std::swap(leaves[a], leaves[b]);
  });
}

// The `index`-th uniform value in [0, 1) of the fraction stream of (seed,
// counter): 53 random bits.
inline double UniformFraction(uint64_t seed, uint64_t counter, uint64_t index) {
  const uint64_t state = Mix(seed ^ kFractionStream) + Mix(counter + kGolden) + (index + 1) * kGolden;
  return static_cast<double>(Mix(state) >> 11) * 0x1.0p-53;
}

}  // namespace perserve::replay
