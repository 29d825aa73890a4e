#include "service/row_pins.h"

#include <gtest/gtest.h>

namespace perserve::service {
namespace {

TEST(RowPinsTest, PinsTheRowsUntilTheirReplyCompletes) {
  RowPins pins(8);
  EXPECT_FALSE(pins.Holds(0, 8));
  const std::vector<int64_t> slots{1, 1};  // a slot two parts of the reply read (two frames of stacks)
  pins.Pin(/*token=*/5, /*client=*/3, slots);
  EXPECT_TRUE(pins.Holds(0, 2));
  EXPECT_FALSE(pins.Holds(2, 6)) << "only slot 1 is pinned";
  EXPECT_TRUE(pins.Holds(7, 3)) << "around the ring's end: 7, 0, 1";
  EXPECT_EQ(pins.OldestClient(), 3);
  const std::vector<uint64_t> done{5};
  pins.Release(done);
  EXPECT_FALSE(pins.Holds(0, 8));
  EXPECT_TRUE(pins.empty());
}

TEST(RowPinsTest, ASlotPinnedByTwoRepliesStaysPinnedUntilBothComplete) {
  RowPins pins(4);
  const std::vector<int64_t> slot{2};
  pins.Pin(1, 0, slot);
  pins.Pin(2, 1, slot);
  EXPECT_EQ(pins.OldestClient(), 0);
  const std::vector<uint64_t> first{1}, second{2}, unknown{9};
  pins.Release(unknown);
  pins.Release(first);
  EXPECT_TRUE(pins.Holds(2, 1));
  EXPECT_EQ(pins.OldestClient(), 1);
  pins.Release(second);
  EXPECT_FALSE(pins.Holds(2, 1));
}

}  // namespace
}  // namespace perserve::service
