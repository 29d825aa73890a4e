#include "service/waiting_samples.h"

#include <gtest/gtest.h>

namespace perserve::service {
namespace {

WaitingSample Sample(int client, uint64_t id) { return WaitingSample{client, id, 4, 0.5, {}, {}}; }

TEST(WaitingSamplesTest, KeepsArrivalOrderAndEachClientsCount) {
  WaitingSamples waiting(2);
  waiting.Push(Sample(0, 1));
  waiting.Push(Sample(1, 1));
  waiting.Push(Sample(0, 2));
  EXPECT_EQ(waiting.count(0), 2);
  EXPECT_EQ(waiting.count(1), 1);
  auto it = waiting.begin();
  ++it;
  const WaitingSample taken = waiting.Take(&it);
  EXPECT_EQ(taken.client, 1);
  EXPECT_EQ(it->request_id, 2u) << "the iterator moved to the next";
  EXPECT_EQ(waiting.count(1), 0);
  waiting.ForgetClient(0);
  EXPECT_TRUE(waiting.empty());
  EXPECT_EQ(waiting.count(0), 0);
}

TEST(WaitingSamplesTest, TakeAllEmptiesTheQueueAndTheCounts) {
  WaitingSamples waiting(1);
  waiting.Push(Sample(0, 1));
  waiting.Push(Sample(0, 2));
  const auto all = waiting.TakeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all.front().request_id, 1u);
  EXPECT_TRUE(waiting.empty());
  EXPECT_EQ(waiting.count(0), 0);
}

}  // namespace
}  // namespace perserve::service
