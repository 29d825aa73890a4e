// PortableShuffle and PortableBelow (client/src/portable_shuffle.h): a
// seed's permutations pinned, so every standard library must give them, and,
// built against libstdc++, the same permutation and engine state as
// std::shuffle for every size up to 600 and a few larger ones.
#include "client/src/portable_shuffle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace perserve::client_internal {
namespace {

std::vector<int> Shuffled(int size, std::mt19937_64* engine) {
  std::vector<int> values(static_cast<size_t>(size));
  std::iota(values.begin(), values.end(), 0);
  PortableShuffle(std::span(values), engine);
  return values;
}

TEST(PortableShuffleTest, ASeedsPermutationsArePinned) {
  // libstdc++'s std::shuffle on std::mt19937_64(42), with the engine's next
  // output after it (how many outputs the shuffle took).
  std::mt19937_64 engine(42);
  EXPECT_EQ(Shuffled(1, &engine), std::vector<int>{0});
  EXPECT_EQ(engine(), 0xc151df7d6ee5e2d6ULL);  // none: the engine's first output
  engine.seed(42);
  EXPECT_EQ(Shuffled(2, &engine), (std::vector<int>{0, 1}));
  EXPECT_EQ(engine(), 0xa3978fb9b92502a8ULL);  // one
  engine.seed(42);
  EXPECT_EQ(Shuffled(7, &engine), (std::vector<int>{0, 2, 4, 6, 5, 3, 1}));
  EXPECT_EQ(engine(), 0x22e2c43f8a1ad34eULL);
  engine.seed(42);
  EXPECT_EQ(Shuffled(10, &engine), (std::vector<int>{6, 9, 1, 4, 5, 3, 0, 7, 8, 2}));
  EXPECT_EQ(engine(), 0x1814dc629c7f4f7cULL);
  std::vector<int> none;
  PortableShuffle(std::span(none), &engine);
  EXPECT_TRUE(none.empty());
}

TEST(PortableShuffleTest, PortableBelowStaysBelowAndRejectsTheBiasedTail) {
  std::mt19937_64 engine(3);
  for (uint64_t size : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1000}, (uint64_t{1} << 63) + 1}) {
    for (int i = 0; i < 1000; ++i) ASSERT_LT(PortableBelow(&engine, size), size) << size;
  }
}

#ifdef __GLIBCXX__
TEST(PortableShuffleTest, PermutesAsLibstdcxxsShuffle) {
  for (uint64_t seed : {1u, 5u, 42u}) {
    std::vector<int> sizes(600);
    std::iota(sizes.begin(), sizes.end(), 1);
    sizes.insert(sizes.end(), {1023, 1024, 4096, 65537});
    for (int size : sizes) {
      std::mt19937_64 ours(seed + static_cast<uint64_t>(size)), theirs(seed + static_cast<uint64_t>(size));
      std::vector<int> expected(static_cast<size_t>(size));
      std::iota(expected.begin(), expected.end(), 0);
      std::shuffle(expected.begin(), expected.end(), theirs);
      ASSERT_EQ(Shuffled(size, &ours), expected) << "seed " << seed << ", size " << size;
      ASSERT_EQ(ours(), theirs()) << "seed " << seed << ", size " << size;
    }
  }
  // PortableBelow is std::uniform_int_distribution<uint64_t>(0, size - 1).
  std::mt19937_64 ours(9), theirs(9);
  for (uint64_t size : {uint64_t{1}, uint64_t{6}, uint64_t{1000000007}, (uint64_t{1} << 63) + 1, UINT64_MAX}) {
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(PortableBelow(&ours, size), std::uniform_int_distribution<uint64_t>(0, size - 1)(theirs)) << size;
    }
  }
}
#endif

}  // namespace
}  // namespace perserve::client_internal
