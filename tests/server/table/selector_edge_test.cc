// The selectors' edge cases: names, options, refused calls that must change
// nothing, capacity 1, the heaps' ties, and the draws' exact placement.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "table/heap_selector.h"
#include "table/selector.h"

namespace perserve::table {
namespace {

constexpr SelectorKind kAllKinds[] = {SelectorKind::kPrioritized, SelectorKind::kUniform, SelectorKind::kFifo,
                                      SelectorKind::kLifo,        SelectorKind::kMaxHeap, SelectorKind::kMinHeap};

std::unique_ptr<Selector> MakeSelector(SelectorKind kind, int64_t capacity, double alpha = 1.0) {
  std::unique_ptr<Selector> selector;
  const Status created = Selector::Create(kind, SelectorOptions{capacity, alpha, tree::Device::kCpu}, &selector);
  EXPECT_TRUE(created.ok()) << created.ToString();
  return selector;
}

struct Draws {
  std::vector<int64_t> slots;
  std::vector<double> probabilities;
  bool operator==(const Draws&) const = default;
};

// Draws at 64 evenly spread fractions: a fingerprint of what the selector would draw.
Draws DrawSpread(const Selector& selector) {
  std::vector<double> fractions(64);
  for (size_t i = 0; i < fractions.size(); ++i) fractions[i] = (static_cast<double>(i) + 0.5) / 64.0;
  Draws draws{std::vector<int64_t>(64), std::vector<double>(64)};
  EXPECT_TRUE(selector.Select(fractions, draws.slots, draws.probabilities).ok());
  return draws;
}

std::vector<int64_t> Held(const Selector& selector) {
  std::vector<int64_t> held;
  selector.ListHeld(&held);
  return held;
}

class SelectorEdgeTest : public ::testing::TestWithParam<SelectorKind> {};

std::string KindName(const ::testing::TestParamInfo<SelectorKind>& info) {
  return std::string(SelectorKindName(info.param));
}

TEST(SelectorNamesTest, ParseAndPrintRoundTrip) {
  for (const SelectorKind kind : kAllKinds) {
    SelectorKind parsed = kind == SelectorKind::kFifo ? SelectorKind::kLifo : SelectorKind::kFifo;
    ASSERT_TRUE(ParseSelectorKind(SelectorKindName(kind), &parsed).ok()) << SelectorKindName(kind);
    EXPECT_EQ(parsed, kind);
  }
  EXPECT_EQ(SelectorKindName(SelectorKind::kMaxHeap), "max_heap");
  EXPECT_EQ(SelectorKindName(SelectorKind::kPrioritized), "prioritized");
}

TEST(SelectorNamesTest, UnknownNameIsRefusedNamingTheKnownOnes) {
  SelectorKind kind = SelectorKind::kUniform;
  const Status status = ParseSelectorKind("heap", &kind);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  for (const char* known : {"prioritized", "uniform", "fifo", "lifo", "max_heap", "min_heap"}) {
    EXPECT_NE(status.message().find(known), std::string::npos) << status.message();
  }
  EXPECT_EQ(kind, SelectorKind::kUniform);
}

TEST(SelectorOptionsTest, BadCapacityOrAlphaIsRefused) {
  std::unique_ptr<Selector> selector;
  EXPECT_EQ(Selector::Create(SelectorKind::kFifo, SelectorOptions{0, 1.0}, &selector).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Selector::Create(SelectorKind::kUniform, SelectorOptions{-5, 1.0}, &selector).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Selector::Create(SelectorKind::kPrioritized, SelectorOptions{8, -0.5}, &selector).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Selector::Create(SelectorKind::kPrioritized, SelectorOptions{8, std::nan("")}, &selector).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(selector, nullptr);
}

TEST_P(SelectorEdgeTest, KindAndCapacityAreAsCreated) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 5);
  EXPECT_EQ(selector->kind(), GetParam());
  EXPECT_EQ(selector->capacity(), 5);
  EXPECT_EQ(selector->size(), 0);
}

TEST_P(SelectorEdgeTest, EmptySelectorRefusesADraw) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 8);
  std::vector<double> fractions{0.5};
  std::vector<int64_t> slots(1);
  std::vector<double> probabilities(1);
  EXPECT_EQ(selector->Select(fractions, slots, probabilities).code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(selector->Select({}, {}, {}).ok());  // an empty batch draws nothing
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{3}, std::vector<double>{1.0}).ok());
  ASSERT_TRUE(selector->Delete(std::vector<int64_t>{3}).ok());
  EXPECT_EQ(selector->Select(fractions, slots, probabilities).code(), Status::Code::kFailedPrecondition);
}

TEST_P(SelectorEdgeTest, BadFractionsAndSizesAreRefused) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 8);
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{1, 2}, std::vector<double>{1.0, 2.0}).ok());
  std::vector<int64_t> slots(2);
  std::vector<double> probabilities(2);
  for (const double bad : {-0.25, 1.0, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const Status status = selector->Select(std::vector<double>{0.5, bad}, slots, probabilities);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("position 1"), std::string::npos) << status.message();
  }
  std::vector<int64_t> one_slot(1);
  EXPECT_EQ(selector->Select(std::vector<double>{0.1, 0.2}, one_slot, probabilities).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(selector->Insert(std::vector<int64_t>{4, 5}, std::vector<double>{1.0}).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(selector->Update(std::vector<int64_t>{1}, std::vector<double>{}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(selector->size(), 2);
}

TEST_P(SelectorEdgeTest, BadPrioritiesAreRefusedWithNothingChanged) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 16);
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{0, 5, 9}, std::vector<double>{3.0, 1.0, 2.0}).ok());
  const Draws before = DrawSpread(*selector);
  const std::vector<int64_t> held = Held(*selector);
  for (const double bad : {-1.0, -0.0 - 1e-300, std::nan(""), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()}) {
    const Status inserted = selector->Insert(std::vector<int64_t>{7, 8}, std::vector<double>{4.0, bad});
    EXPECT_EQ(inserted.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(inserted.message().find("position 1"), std::string::npos) << inserted.message();
    const Status updated = selector->Update(std::vector<int64_t>{5, 0}, std::vector<double>{9.0, bad});
    EXPECT_EQ(updated.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_FALSE(selector->Holds(7));
    EXPECT_EQ(selector->size(), 3);
    EXPECT_EQ(Held(*selector), held);
    EXPECT_EQ(DrawSpread(*selector), before);
  }
}

TEST_P(SelectorEdgeTest, SlotsOutsideTheCapacityAreRefused) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 4);
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{2}, std::vector<double>{1.0}).ok());
  for (const int64_t bad : {int64_t{-1}, int64_t{4}, std::numeric_limits<int64_t>::max()}) {
    const Status inserted = selector->Insert(std::vector<int64_t>{0, bad}, std::vector<double>{1.0, 1.0});
    EXPECT_EQ(inserted.code(), Status::Code::kOutOfRange) << bad;
    EXPECT_NE(inserted.message().find("position 1"), std::string::npos) << inserted.message();
    EXPECT_EQ(selector->Update(std::vector<int64_t>{bad}, std::vector<double>{1.0}).code(),
              Status::Code::kOutOfRange);
    EXPECT_EQ(selector->Delete(std::vector<int64_t>{2, bad}).code(), Status::Code::kOutOfRange);
    EXPECT_FALSE(selector->Holds(bad));
  }
  EXPECT_EQ(Held(*selector), std::vector<int64_t>{2});
  EXPECT_FALSE(selector->Holds(0));
}

TEST_P(SelectorEdgeTest, HeldAndUnheldSlotsAreCheckedWithNothingChanged) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 10);
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{1, 2, 3}, std::vector<double>{1.0, 5.0, 2.0}).ok());
  const Draws before = DrawSpread(*selector);
  const std::vector<int64_t> held = Held(*selector);

  EXPECT_EQ(selector->Insert(std::vector<int64_t>{4, 2}, std::vector<double>{1.0, 1.0}).code(),
            Status::Code::kFailedPrecondition);  // 2 is held
  EXPECT_EQ(selector->Insert(std::vector<int64_t>{4, 5, 4}, std::vector<double>{1.0, 1.0, 1.0}).code(),
            Status::Code::kInvalidArgument);  // 4 twice
  EXPECT_EQ(selector->Update(std::vector<int64_t>{1, 6}, std::vector<double>{7.0, 1.0}).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(selector->Delete(std::vector<int64_t>{1, 6}).code(), Status::Code::kNotFound);
  EXPECT_EQ(selector->Delete(std::vector<int64_t>{3, 1, 3}).code(), Status::Code::kInvalidArgument);

  EXPECT_EQ(Held(*selector), held);
  EXPECT_EQ(DrawSpread(*selector), before);
  for (const int64_t slot : {4, 5, 6}) EXPECT_FALSE(selector->Holds(slot)) << slot;

  // Deleting a slot twice, in two batches: the second is refused.
  ASSERT_TRUE(selector->Delete(std::vector<int64_t>{2}).ok());
  EXPECT_EQ(selector->Delete(std::vector<int64_t>{2}).code(), Status::Code::kNotFound);
  EXPECT_EQ(selector->size(), 2);
}

TEST_P(SelectorEdgeTest, CapacityOneHoldsOneSlot) {
  const std::unique_ptr<Selector> selector = MakeSelector(GetParam(), 1);
  EXPECT_EQ(selector->Insert(std::vector<int64_t>{1}, std::vector<double>{1.0}).code(), Status::Code::kOutOfRange);
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{0}, std::vector<double>{0.0}).ok());
  std::vector<int64_t> slots(3, -7);
  std::vector<double> probabilities(3);
  ASSERT_TRUE(selector->Select(std::vector<double>{0.0, 0.5, std::nextafter(1.0, 0.0)}, slots, probabilities).ok());
  EXPECT_EQ(slots, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(probabilities, (std::vector<double>{1.0, 1.0, 1.0}));
  ASSERT_TRUE(selector->Update(std::vector<int64_t>{0, 0}, std::vector<double>{2.0, 3.0}).ok());
  ASSERT_TRUE(selector->Delete(std::vector<int64_t>{0}).ok());
  EXPECT_EQ(selector->size(), 0);
  EXPECT_EQ(selector->Select(std::vector<double>{0.5}, std::span(slots).first(1),
                             std::span(probabilities).first(1)).code(),
            Status::Code::kFailedPrecondition);
  ASSERT_TRUE(selector->Insert(std::vector<int64_t>{0}, std::vector<double>{4.0}).ok());
  EXPECT_EQ(Held(*selector), std::vector<int64_t>{0});
}

INSTANTIATE_TEST_SUITE_P(AllKinds, SelectorEdgeTest, ::testing::ValuesIn(kAllKinds), KindName);

// Draws one item and returns its slot.
int64_t DrawOne(const Selector& selector) {
  std::vector<int64_t> slot(1);
  std::vector<double> probability(1);
  EXPECT_TRUE(selector.Select(std::vector<double>{0.3}, slot, probability).ok());
  return slot[0];
}

TEST(HeapSelectorTest, TiesGoToThePrioritySetFirst) {
  for (const SelectorKind kind : {SelectorKind::kMaxHeap, SelectorKind::kMinHeap}) {
    const std::unique_ptr<Selector> heap = MakeSelector(kind, 8);
    ASSERT_TRUE(heap->Insert(std::vector<int64_t>{5, 3, 7}, std::vector<double>{1.0, 1.0, 1.0}).ok());
    EXPECT_EQ(DrawOne(*heap), 5);
    // An update, even to the same priority, goes behind its equals.
    ASSERT_TRUE(heap->Update(std::vector<int64_t>{5}, std::vector<double>{1.0}).ok());
    EXPECT_EQ(DrawOne(*heap), 3);
    ASSERT_TRUE(heap->Delete(std::vector<int64_t>{3}).ok());
    EXPECT_EQ(DrawOne(*heap), 7);
    ASSERT_TRUE(heap->Delete(std::vector<int64_t>{7}).ok());
    EXPECT_EQ(DrawOne(*heap), 5);
    EXPECT_EQ(Held(*heap), std::vector<int64_t>{5});
  }
}

// A table's lowest-priority remover: an update keeps the item's place among its equals.
TEST(HeapSelectorTest, TiesCanGoToTheInsertedFirst) {
  HeapSelector heap(SelectorKind::kMinHeap, 8, HeapSelector::Ties::kInsertedFirst);
  ASSERT_TRUE(heap.Insert(std::vector<int64_t>{5, 3, 7}, std::vector<double>{1.0, 1.0, 1.0}).ok());
  ASSERT_TRUE(heap.Update(std::vector<int64_t>{5}, std::vector<double>{1.0}).ok());
  EXPECT_EQ(DrawOne(heap), 5);
  ASSERT_TRUE(heap.Update(std::vector<int64_t>{5}, std::vector<double>{2.0}).ok());
  EXPECT_EQ(DrawOne(heap), 3);
  ASSERT_TRUE(heap.Update(std::vector<int64_t>{5}, std::vector<double>{1.0}).ok());
  EXPECT_EQ(DrawOne(heap), 5);
  EXPECT_EQ(Held(heap), (std::vector<int64_t>{5, 3, 7}));  // the rebuild order: as inserted
}

// ListFirst(k) is what k draws, each followed by a delete of the drawn slot, take.
TEST(HeapSelectorTest, ListFirstIsTheDrawOrder) {
  for (const SelectorKind kind : {SelectorKind::kMaxHeap, SelectorKind::kMinHeap}) {
    HeapSelector heap(kind, 64);
    std::vector<int64_t> slots;
    std::vector<double> priorities;
    for (int64_t slot = 0; slot < 64; ++slot) {
      slots.push_back((slot * 37) % 64);
      priorities.push_back(static_cast<double>((slot * 11) % 9));  // many ties
    }
    ASSERT_TRUE(heap.Insert(slots, priorities).ok());
    ASSERT_TRUE(heap.Update(std::vector<int64_t>{3, 40}, std::vector<double>{4.0, 0.0}).ok());
    std::vector<int64_t> listed;
    heap.ListFirst(20, &listed);
    std::vector<int64_t> drawn;
    for (int i = 0; i < 20; ++i) {
      drawn.push_back(DrawOne(heap));
      ASSERT_TRUE(heap.Delete(std::span<const int64_t>(&drawn.back(), 1)).ok());
    }
    EXPECT_EQ(listed, drawn) << SelectorKindName(kind);
    heap.ListFirst(100, &listed);
    EXPECT_EQ(listed.size(), 44u);  // all that is held, no more
  }
}

TEST(HeapSelectorTest, DrawsTheHighestOrLowestPriority) {
  const std::vector<int64_t> slots{0, 1, 2, 3, 4};
  const std::vector<double> priorities{2.0, 0.0, 9.5, 9.5, 0.0};
  const std::unique_ptr<Selector> max_heap = MakeSelector(SelectorKind::kMaxHeap, 5);
  const std::unique_ptr<Selector> min_heap = MakeSelector(SelectorKind::kMinHeap, 5);
  ASSERT_TRUE(max_heap->Insert(slots, priorities).ok());
  ASSERT_TRUE(min_heap->Insert(slots, priorities).ok());
  EXPECT_EQ(DrawOne(*max_heap), 2);
  EXPECT_EQ(DrawOne(*min_heap), 1);
  ASSERT_TRUE(max_heap->Update(std::vector<int64_t>{1}, std::vector<double>{100.0}).ok());
  ASSERT_TRUE(min_heap->Update(std::vector<int64_t>{1}, std::vector<double>{100.0}).ok());
  EXPECT_EQ(DrawOne(*max_heap), 1);
  EXPECT_EQ(DrawOne(*min_heap), 4);
}

TEST(InsertionOrderSelectorTest, FifoDrawsTheOldestAndLifoTheNewest) {
  const std::unique_ptr<Selector> fifo = MakeSelector(SelectorKind::kFifo, 8);
  const std::unique_ptr<Selector> lifo = MakeSelector(SelectorKind::kLifo, 8);
  for (Selector* selector : {fifo.get(), lifo.get()}) {
    ASSERT_TRUE(selector->Insert(std::vector<int64_t>{6, 2, 4}, std::vector<double>{0.0, 9.0, 1.0}).ok());
    ASSERT_TRUE(selector->Update(std::vector<int64_t>{6}, std::vector<double>{5.0}).ok());  // no effect on order
  }
  EXPECT_EQ(DrawOne(*fifo), 6);
  EXPECT_EQ(DrawOne(*lifo), 4);
  ASSERT_TRUE(fifo->Delete(std::vector<int64_t>{6}).ok());
  ASSERT_TRUE(lifo->Delete(std::vector<int64_t>{4}).ok());
  EXPECT_EQ(DrawOne(*fifo), 2);
  EXPECT_EQ(DrawOne(*lifo), 2);
  EXPECT_EQ(Held(*fifo), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(Held(*lifo), (std::vector<int64_t>{6, 2}));
}

TEST(UniformSelectorTest, EvenlySpreadFractionsDrawEachItemOnce) {
  const std::unique_ptr<Selector> uniform = MakeSelector(SelectorKind::kUniform, 64);
  std::vector<int64_t> slots;
  for (int64_t slot = 0; slot < 64; slot += 3) slots.push_back(slot);
  ASSERT_TRUE(uniform->Insert(slots, std::vector<double>(slots.size(), 1.0)).ok());
  ASSERT_TRUE(uniform->Delete(std::vector<int64_t>{0, 30}).ok());
  const int64_t n = uniform->size();
  std::vector<double> fractions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) fractions[i] = (static_cast<double>(i) + 0.5) / static_cast<double>(n);
  std::vector<int64_t> drawn(fractions.size());
  std::vector<double> probabilities(fractions.size());
  ASSERT_TRUE(uniform->Select(fractions, drawn, probabilities).ok());
  std::sort(drawn.begin(), drawn.end());
  std::vector<int64_t> expected;
  for (const int64_t slot : slots) {
    if (slot != 0 && slot != 30) expected.push_back(slot);
  }
  EXPECT_EQ(drawn, expected);
  for (const double p : probabilities) EXPECT_EQ(p, 1.0 / static_cast<double>(n));
}

TEST(PrioritizedSelectorTest, DrawsAtMassesProportionalToPriorityPowers) {
  // alpha 0.5: leaves 1, 2, 3 for priorities 1, 4, 9; total 6.
  const std::unique_ptr<Selector> prioritized = MakeSelector(SelectorKind::kPrioritized, 6, 0.5);
  ASSERT_TRUE(prioritized->Insert(std::vector<int64_t>{4, 1, 2}, std::vector<double>{9.0, 1.0, 4.0}).ok());
  // Slot order 1, 2, 4: masses [0, 1), [1, 3), [3, 6).
  std::vector<double> fractions{0.0, 0.99 / 6, 1.01 / 6, 2.99 / 6, 3.01 / 6, std::nextafter(1.0, 0.0)};
  std::vector<int64_t> slots(fractions.size());
  std::vector<double> probabilities(fractions.size());
  ASSERT_TRUE(prioritized->Select(fractions, slots, probabilities).ok());
  EXPECT_EQ(slots, (std::vector<int64_t>{1, 1, 2, 2, 4, 4}));
  EXPECT_EQ(probabilities, (std::vector<double>{1.0 / 6, 1.0 / 6, 2.0 / 6, 2.0 / 6, 3.0 / 6, 3.0 / 6}));
  ASSERT_TRUE(prioritized->Delete(std::vector<int64_t>{2}).ok());
  ASSERT_TRUE(prioritized->Select(fractions, slots, probabilities).ok());
  EXPECT_EQ(slots, (std::vector<int64_t>{1, 1, 1, 4, 4, 4}));
  EXPECT_EQ(probabilities[0], 0.25);
  EXPECT_EQ(probabilities[5], 0.75);
}

TEST(PrioritizedSelectorTest, PowerThatOverflowsIsRefusedWithNothingChanged) {
  const std::unique_ptr<Selector> prioritized = MakeSelector(SelectorKind::kPrioritized, 4, 2.0);
  ASSERT_TRUE(prioritized->Insert(std::vector<int64_t>{0}, std::vector<double>{1.0}).ok());
  EXPECT_EQ(prioritized->Insert(std::vector<int64_t>{1, 2}, std::vector<double>{1.0, 1e200}).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(prioritized->Update(std::vector<int64_t>{0}, std::vector<double>{1e200}).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(prioritized->size(), 1);
  EXPECT_FALSE(prioritized->Holds(1));
  EXPECT_EQ(DrawOne(*prioritized), 0);
  // A zero priority is held and drawable, at the smallest leaf.
  ASSERT_TRUE(prioritized->Insert(std::vector<int64_t>{3}, std::vector<double>{0.0}).ok());
  EXPECT_EQ(prioritized->size(), 2);
  std::vector<int64_t> slot(1);
  std::vector<double> probability(1);
  ASSERT_TRUE(prioritized->Select(std::vector<double>{std::nextafter(1.0, 0.0)}, slot, probability).ok());
  EXPECT_TRUE(slot[0] == 0 || slot[0] == 3) << slot[0];
}

}  // namespace
}  // namespace perserve::table
