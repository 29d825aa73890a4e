// Every selector kind against the naive ReferenceSelector, op by op over a
// seeded random history of inserts, updates, deletes, draws and refused
// calls; and the checkpoint round trip (ListHeld, then Insert in that order).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference_selector.h"
#include "table/selector.h"

namespace perserve::table {
namespace {

using testing::MassInterval;
using testing::ReferenceSelector;

constexpr SelectorKind kAllKinds[] = {SelectorKind::kPrioritized, SelectorKind::kUniform, SelectorKind::kFifo,
                                      SelectorKind::kLifo,        SelectorKind::kMaxHeap, SelectorKind::kMinHeap};
constexpr double kAlpha = 0.6;
// Prioritized draws: how far the tree's rounded sums may move a boundary,
// relative to the total.
constexpr double kRelativeTolerance = 1e-12;

std::unique_ptr<Selector> MakeSelector(SelectorKind kind, int64_t capacity) {
  std::unique_ptr<Selector> selector;
  const Status created = Selector::Create(kind, SelectorOptions{capacity, kAlpha, tree::Device::kCpu}, &selector);
  EXPECT_TRUE(created.ok()) << created.ToString();
  return selector;
}

// Checks one draw of `selector` at fraction u against the reference.
void ExpectDraw(SelectorKind kind, const ReferenceSelector& reference, double u, int64_t slot, double probability,
                const std::string& where) {
  if (kind != SelectorKind::kPrioritized) {
    EXPECT_EQ(slot, reference.ExpectedSlot(u)) << where << " u=" << u;
    EXPECT_EQ(probability, reference.ExpectedProbability()) << where << " u=" << u;
    return;
  }
  ASSERT_TRUE(reference.Holds(slot)) << where << ": drew unheld slot " << slot << " at u=" << u;
  const long double total = reference.TotalLeaves();
  const long double mass = static_cast<long double>(u) * total;
  const MassInterval interval = reference.IntervalOf(slot);
  const long double slack = kRelativeTolerance * total;
  EXPECT_LE(interval.begin - slack, mass) << where << ": slot " << slot << " at u=" << u;
  EXPECT_GE(interval.end + slack, mass) << where << ": slot " << slot << " at u=" << u;
  const double expected = static_cast<double>(reference.LeafOf(slot) / total);
  EXPECT_NEAR(probability, expected, expected * kRelativeTolerance) << where << ": slot " << slot;
}

class SelectorKindTest : public ::testing::TestWithParam<SelectorKind> {};

std::string KindName(const ::testing::TestParamInfo<SelectorKind>& info) {
  return std::string(SelectorKindName(info.param));
}

// A priority with ties and zeros among the draws (the heaps' tie rule, the
// prioritized leaf's clamp), otherwise spread over [0, 10).
double RandomPriority(std::mt19937_64& rng) {
  if (rng() % 3 == 0) return static_cast<double>(rng() % 3);
  return std::uniform_real_distribution<double>(0.0, 10.0)(rng);
}

double RandomFraction(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0: return 0.0;
    case 1: return std::nextafter(1.0, 0.0);
    default: return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  }
}

// Draws `count` distinct slots from `pool` (which it leaves in a new order).
std::vector<int64_t> DistinctFrom(std::vector<int64_t>& pool, size_t count, std::mt19937_64& rng) {
  std::shuffle(pool.begin(), pool.end(), rng);
  return std::vector<int64_t>(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(std::min(count, pool.size())));
}

void ExpectSameHeld(const Selector& selector, const ReferenceSelector& reference, SelectorKind kind,
                    const std::string& where) {
  ASSERT_EQ(selector.size(), reference.size()) << where;
  std::vector<int64_t> held;
  selector.ListHeld(&held);
  const std::vector<int64_t> expected = reference.HeldInRebuildOrder();
  if (kind == SelectorKind::kPrioritized) {
    EXPECT_EQ(std::set<int64_t>(held.begin(), held.end()), std::set<int64_t>(expected.begin(), expected.end()))
        << where;
    EXPECT_EQ(held.size(), expected.size()) << where;
  } else {
    EXPECT_EQ(held, expected) << where;
  }
}

TEST_P(SelectorKindTest, MatchesReferenceOverRandomHistory) {
  const SelectorKind kind = GetParam();
  for (const int64_t capacity : {int64_t{1}, int64_t{7}, int64_t{97}}) {
    std::mt19937_64 rng(1234 + capacity);
    std::unique_ptr<Selector> selector = MakeSelector(kind, capacity);
    ReferenceSelector reference(kind, kAlpha);
    for (int op = 0; op < 4000; ++op) {
      const std::string where = "capacity " + std::to_string(capacity) + " op " + std::to_string(op);
      std::vector<int64_t> held, free;
      for (int64_t slot = 0; slot < capacity; ++slot) (reference.Holds(slot) ? held : free).push_back(slot);
      const size_t batch = 1 + rng() % 6;
      switch (rng() % 5) {
        case 0:
        case 1: {  // insert
          const std::vector<int64_t> slots = DistinctFrom(free, batch, rng);
          std::vector<double> priorities;
          for (size_t j = 0; j < slots.size(); ++j) priorities.push_back(RandomPriority(rng));
          ASSERT_TRUE(selector->Insert(slots, priorities).ok()) << where;
          reference.Insert(slots, priorities);
          break;
        }
        case 2: {  // update, repeats allowed
          if (held.empty()) break;
          std::vector<int64_t> slots;
          std::vector<double> priorities;
          for (size_t j = 0; j < batch; ++j) {
            slots.push_back(held[rng() % held.size()]);
            priorities.push_back(RandomPriority(rng));
          }
          ASSERT_TRUE(selector->Update(slots, priorities).ok()) << where;
          reference.Update(slots, priorities);
          break;
        }
        case 3: {  // delete
          const std::vector<int64_t> slots = DistinctFrom(held, 1 + rng() % 3, rng);
          ASSERT_TRUE(selector->Delete(slots).ok()) << where;
          reference.Delete(slots);
          break;
        }
        case 4: {  // a refused call: must change nothing (checked below by the draws)
          if (held.empty()) break;
          const int64_t some_held = held[rng() % held.size()];
          const double priority = RandomPriority(rng);
          if (!free.empty()) {
            const int64_t some_free = free[rng() % free.size()];
            EXPECT_FALSE(selector->Insert(std::vector<int64_t>{some_free, some_held},
                                          std::vector<double>{priority, priority}).ok()) << where;
            EXPECT_FALSE(selector->Update(std::vector<int64_t>{some_held, some_free},
                                          std::vector<double>{priority, priority}).ok()) << where;
          }
          EXPECT_FALSE(selector->Update(std::vector<int64_t>{some_held, some_held},
                                        std::vector<double>{priority, std::nan("")}).ok()) << where;
          EXPECT_FALSE(selector->Delete(std::vector<int64_t>{some_held, some_held}).ok()) << where;
          EXPECT_FALSE(selector->Delete(std::vector<int64_t>{some_held, capacity}).ok()) << where;
          break;
        }
      }
      ASSERT_NO_FATAL_FAILURE(ExpectSameHeld(*selector, reference, kind, where));
      if (reference.size() == 0) continue;
      std::vector<double> fractions(1 + rng() % 8);
      for (double& u : fractions) u = RandomFraction(rng);
      std::vector<int64_t> slots(fractions.size());
      std::vector<double> probabilities(fractions.size());
      ASSERT_TRUE(selector->Select(fractions, slots, probabilities).ok()) << where;
      for (size_t i = 0; i < fractions.size(); ++i) {
        ASSERT_NO_FATAL_FAILURE(ExpectDraw(kind, reference, fractions[i], slots[i], probabilities[i], where));
      }
    }
  }
}

// A checkpoint's restore: ListHeld, then Insert those slots in that order (in
// consecutive batches of any size) with their last priorities, into a fresh
// selector; every draw of the two is identical, bit for bit.
TEST_P(SelectorKindTest, RebuildFromListHeldDrawsIdentically) {
  const SelectorKind kind = GetParam();
  constexpr int64_t kCapacity = 300;
  std::mt19937_64 rng(77);
  std::unique_ptr<Selector> original = MakeSelector(kind, kCapacity);
  ReferenceSelector reference(kind, kAlpha);
  for (int op = 0; op < 2000; ++op) {
    std::vector<int64_t> held, free;
    for (int64_t slot = 0; slot < kCapacity; ++slot) (reference.Holds(slot) ? held : free).push_back(slot);
    if (op % 3 != 2 || held.empty()) {
      const std::vector<int64_t> slots = DistinctFrom(free, 1 + rng() % 4, rng);
      std::vector<double> priorities;
      for (size_t j = 0; j < slots.size(); ++j) priorities.push_back(RandomPriority(rng));
      ASSERT_TRUE(original->Insert(slots, priorities).ok());
      reference.Insert(slots, priorities);
    } else if (rng() % 2 == 0) {
      const std::vector<int64_t> slots = DistinctFrom(held, 1 + rng() % 3, rng);
      ASSERT_TRUE(original->Delete(slots).ok());
      reference.Delete(slots);
    } else {
      const std::vector<int64_t> slots = DistinctFrom(held, 1 + rng() % 3, rng);
      std::vector<double> priorities;
      for (size_t j = 0; j < slots.size(); ++j) priorities.push_back(RandomPriority(rng));
      ASSERT_TRUE(original->Update(slots, priorities).ok());
      reference.Update(slots, priorities);
    }
  }
  ASSERT_GT(original->size(), 20);

  std::vector<int64_t> listed;
  original->ListHeld(&listed);
  std::unique_ptr<Selector> rebuilt = MakeSelector(kind, kCapacity);
  for (size_t begin = 0; begin < listed.size();) {
    const size_t end = std::min(listed.size(), begin + 1 + rng() % 40);
    std::vector<int64_t> slots(listed.begin() + static_cast<std::ptrdiff_t>(begin),
                               listed.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<double> priorities;
    for (const int64_t slot : slots) priorities.push_back(reference.PriorityOf(slot));
    ASSERT_TRUE(rebuilt->Insert(slots, priorities).ok());
    begin = end;
  }
  std::vector<int64_t> relisted;
  rebuilt->ListHeld(&relisted);
  EXPECT_EQ(relisted, listed);

  // The two must keep drawing alike after the same further changes.
  for (int round = 0; round < 20; ++round) {
    std::vector<double> fractions(512);
    for (double& u : fractions) u = RandomFraction(rng);
    std::vector<int64_t> slots(512), rebuilt_slots(512);
    std::vector<double> probabilities(512), rebuilt_probabilities(512);
    ASSERT_TRUE(original->Select(fractions, slots, probabilities).ok());
    ASSERT_TRUE(rebuilt->Select(fractions, rebuilt_slots, rebuilt_probabilities).ok());
    ASSERT_EQ(slots, rebuilt_slots) << "round " << round;
    ASSERT_EQ(probabilities, rebuilt_probabilities) << "round " << round;
    const int64_t drawn = slots[0];
    const std::vector<int64_t> one{drawn};
    if (round % 2 == 0) {
      const std::vector<double> priority{RandomPriority(rng)};
      ASSERT_TRUE(original->Update(one, priority).ok());
      ASSERT_TRUE(rebuilt->Update(one, priority).ok());
    } else {
      ASSERT_TRUE(original->Delete(one).ok());
      ASSERT_TRUE(rebuilt->Delete(one).ok());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, SelectorKindTest, ::testing::ValuesIn(kAllKinds), KindName);

}  // namespace
}  // namespace perserve::table
