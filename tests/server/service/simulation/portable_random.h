// The simulation's draws, the same under every standard library (issue 35).
// std::mt19937_64's outputs are fixed by the standard (it gives the 10000th),
// its distributions' are not: libc++ draws other integers than libstdc++
// from the same engine, so a seed's schedule was libstdc++'s alone. These are
// libstdc++'s algorithms (GCC 11 to 14) written out, so every seed keeps the
// schedule it had there (the pinned regression seeds among them) and has the
// same one under any other library; PortableRandomTest pins the first draws
// of a seed and, built against libstdc++, checks them against std::'s.
//
// Every draw, with what it was asked for, is folded into digest(): equal
// digests, equal decisions (scripts/sim-portability.sh compares two builds').
// Not thread-safe; a draw is O(1) (an integer's may retry, rarely).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

namespace perserve::service::simulation {

class PortableRandom {
 public:
  explicit PortableRandom(uint64_t seed) : engine_(seed) {}

  // The engine's next output, all 64 bits.
  uint64_t Bits() { return Fold(engine_()); }

  // Uniform in [lo, hi], lo <= hi: Lemire's nearly divisionless method on
  // the 128-bit product of an output and the range's size (libstdc++'s).
  int64_t Int(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    uint64_t offset;
    if (range == UINT64_MAX) {
      offset = engine_();
    } else {
      const uint64_t size = range + 1;
      unsigned __int128 product = static_cast<unsigned __int128>(engine_()) * size;
      if (static_cast<uint64_t>(product) < size) {
        const uint64_t threshold = (0 - size) % size;  // 2^64 mod size: the outputs' biased tail
        while (static_cast<uint64_t>(product) < threshold) {
          product = static_cast<unsigned __int128>(engine_()) * size;
        }
      }
      offset = static_cast<uint64_t>(product >> 64);
    }
    const int64_t value = static_cast<int64_t>(static_cast<uint64_t>(lo) + offset);
    Fold(static_cast<uint64_t>(lo));
    Fold(range);
    return static_cast<int64_t>(Fold(static_cast<uint64_t>(value)));
  }

  // Uniform in [0, 1): one output over 2^64, rounded to the nearest double,
  // below 1 (std::generate_canonical<double, 53> on a 64-bit engine).
  double Canonical() {
    double value = static_cast<double>(engine_()) / 0x1p64;
    if (value >= 1.0) value = std::nextafter(1.0, 0.0);
    Fold(BitsOf(value));
    return value;
  }

  // Uniform in [lo, hi): Canonical() * (hi - lo) + lo, rounded twice as the
  // expression says (never fused into one multiply-add, which some machines
  // would do and others not).
  double Real(double lo, double hi) {
    volatile double scaled = Canonical() * (hi - lo);
    const double value = scaled + lo;
    Fold(BitsOf(lo));
    Fold(BitsOf(hi));
    return value;
  }

  // True with probability p (std::bernoulli_distribution: Canonical() < p).
  bool Chance(double p) {
    const bool value = Canonical() < p;
    Fold(BitsOf(p));
    Fold(value);
    return value;
  }

  // Of every draw so far, in order, with its bounds.
  uint64_t digest() const { return digest_; }

 private:
  static uint64_t BitsOf(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  }
  // SplitMix64's finalizer over the digest and the value; returns the value.
  uint64_t Fold(uint64_t value) {
    uint64_t z = digest_ + value + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    digest_ = z ^ (z >> 31);
    return value;
  }

  std::mt19937_64 engine_;
  uint64_t digest_ = 0;
};

}  // namespace perserve::service::simulation
