// PortableRandom (portable_random.h): a seed's first draws, pinned, so every
// build and standard library must draw them; and, built against libstdc++,
// draw for draw the values std::'s distributions give on the same engine
// (the schedules seeds had before, the pinned regression seeds' among them).
#include "server/service/simulation/portable_random.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace perserve::service::simulation {
namespace {

TEST(PortableRandomTest, TheFirstDrawsOfASeedArePinned) {
  PortableRandom random(42);
  // std::mt19937_64(42)'s first outputs, which the standard fixes.
  EXPECT_EQ(random.Bits(), 0xc151df7d6ee5e2d6ULL);
  EXPECT_EQ(random.Bits(), 0xa3978fb9b92502a8ULL);
  EXPECT_EQ(random.Bits(), 0xc08c967f0e5e7b0aULL);
  // (libc++'s std::uniform_int_distribution(1, 6) draws 6 5 1 1 2 4 here.)
  std::vector<int64_t> dice;
  for (int i = 0; i < 6; ++i) dice.push_back(random.Int(1, 6));
  EXPECT_EQ(dice, (std::vector<int64_t>{1, 6, 1, 4, 3, 2}));
  EXPECT_EQ(random.Int(-1000, 1000000007), 390270274);
  EXPECT_EQ(random.Int(-1000, 1000000007), 12381783);
  EXPECT_EQ(random.Int(-1000, 1000000007), 523705116);
  EXPECT_EQ(random.Canonical(), 0x1.5edbe0cab8d12p-1);
  EXPECT_EQ(random.Canonical(), 0x1.46512f5c3114fp-1);
  EXPECT_EQ(random.Canonical(), 0x1.a73187936056bp-1);
  EXPECT_EQ(random.Real(-3.0, 3.0), 0x1.564be35780c64p+1);
  EXPECT_EQ(random.Real(-3.0, 3.0), 0x1.84f191dff6ea8p+0);
  EXPECT_EQ(random.Real(-3.0, 3.0), -0x1.39dc10c059f2p-2);
  std::vector<bool> chances;
  for (int i = 0; i < 10; ++i) chances.push_back(random.Chance(0.3));
  EXPECT_EQ(chances, (std::vector<bool>{true, true, false, true, false, true, true, true, false, false}));
  EXPECT_EQ(random.digest(), 0xf360ad1a984896efULL);
}

TEST(PortableRandomTest, EqualDrawsGiveEqualDigestsAndADrawsBoundsCount) {
  PortableRandom a(7), b(7);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(a.Int(0, i), b.Int(0, i));
    EXPECT_EQ(a.Chance(0.5), b.Chance(0.5));
  }
  EXPECT_EQ(a.digest(), b.digest());
  // The same engine outputs asked for other bounds: another schedule.
  a.Int(0, 1 << 20);
  b.Int(1, 1 << 20);
  EXPECT_NE(a.digest(), b.digest());
  // The full range (the first output, offset from INT64_MIN) and a range of one value.
  EXPECT_EQ(PortableRandom(42).Int(INT64_MIN, INT64_MAX), static_cast<int64_t>(0xc151df7d6ee5e2d6ULL - (1ULL << 63)));
  EXPECT_EQ(PortableRandom(42).Int(5, 5), 5);
}

#ifdef __GLIBCXX__
// What keeps every seed's schedule from before PortableRandom: libstdc++'s
// distributions, draw for draw, over ranges small, odd and wide (the
// rejection path included: a range just over 2^63 rejects half the outputs).
TEST(PortableRandomTest, DrawsWhatLibstdcxxsDistributionsDraw) {
  const int64_t highs[] = {0, 1, 2, 5, 6, 255, 1000, 4095, 1000000007, INT64_C(1) << 40, INT64_MAX / 3 * 2, INT64_MAX};
  for (uint64_t seed : {1u, 42u, 4242u}) {
    PortableRandom ours(seed);
    std::mt19937_64 engine(seed);
    for (int round = 0; round < 200; ++round) {
      for (int64_t high : highs) {
        const int64_t low = round % 3 == 0 ? 0 : -(high / 2) - round;
        ASSERT_EQ(ours.Int(low, high), std::uniform_int_distribution<int64_t>(low, high)(engine))
            << "seed " << seed << ", [" << low << ", " << high << "], round " << round;
      }
      ASSERT_EQ(ours.Int(0, 255), std::uniform_int_distribution<int>(0, 255)(engine));
      ASSERT_EQ(ours.Real(-3.0, 3.0), std::uniform_real_distribution<double>(-3.0, 3.0)(engine));
      ASSERT_EQ(ours.Real(0.0, 1.0), std::uniform_real_distribution<double>(0.0, 1.0)(engine));
      for (double p : {0.0, 0.2, 1.0 / 3, 0.5, 0.97, 1.0}) {
        ASSERT_EQ(ours.Chance(p), std::bernoulli_distribution(p)(engine)) << "p " << p;
      }
      ASSERT_EQ(ours.Bits(), engine());
    }
  }
}
#endif

}  // namespace
}  // namespace perserve::service::simulation
