#include "service/client_book.h"

#include <gtest/gtest.h>

namespace perserve::service {
namespace {

using Clock = ClientBook::Clock;

TEST(ClientBookTest, CountsOpenClientsByRoleAnUnknownOneAsBoth) {
  const Clock::time_point start = Clock::now();
  ClientBook book({ClientRole::kActor, ClientRole::kLearner, ClientRole::kUnknown}, start);
  EXPECT_EQ(book.open_clients(), 3);
  EXPECT_EQ(book.open_actors(), 2);
  EXPECT_EQ(book.open_learners(), 2);
  EXPECT_TRUE(book.Close(2, start));
  EXPECT_FALSE(book.Close(2, start)) << "closed once";
  EXPECT_EQ(book.open_clients(), 2);
  EXPECT_EQ(book.open_actors(), 1);
  EXPECT_EQ(book.open_learners(), 1);
  EXPECT_FALSE(book.open(2));
}

TEST(ClientBookTest, SaysSinceWhenIntakeGoesOnWithoutALearner) {
  const Clock::time_point start = Clock::now();
  ClientBook book({ClientRole::kActor, ClientRole::kLearner}, start);
  EXPECT_FALSE(book.without_learners_since());
  const Clock::time_point closed = start + std::chrono::seconds(3);
  book.Close(1, closed);
  ASSERT_TRUE(book.without_learners_since());
  EXPECT_EQ(*book.without_learners_since(), closed);
  EXPECT_NE(book.DescribeOpen(closed + std::chrono::seconds(12)).find("no learner open for 12 s"), std::string::npos)
      << book.DescribeOpen(closed + std::chrono::seconds(12));
  book.Close(0, closed);
  EXPECT_FALSE(book.without_learners_since()) << "no actor either: nothing goes on";
}

TEST(ClientBookTest, AJobOfActorsAloneHasHadNoLearnerSinceItsStart) {
  const Clock::time_point start = Clock::now();
  ClientBook book({ClientRole::kActor}, start);
  ASSERT_TRUE(book.without_learners_since());
  EXPECT_EQ(*book.without_learners_since(), start);
}

TEST(ClientBookTest, NamesTheOpenClientsSilentPastTheInterval) {
  const Clock::time_point start = Clock::now();
  ClientBook book({ClientRole::kActor, ClientRole::kLearner, ClientRole::kActor}, start);
  book.Heard(1, start + std::chrono::seconds(9));
  book.Close(2, start);
  const std::string silent =
      book.DescribeSilent(start + std::chrono::seconds(10), 5.0, [](int c) { return "rank " + std::to_string(c); });
  EXPECT_EQ(silent, " | silent: rank 0 (actor) 10 s");
  EXPECT_EQ(book.DescribeSilent(start + std::chrono::seconds(4), 5.0, [](int) { return ""; }), "");
}

TEST(ClientBookTest, KeepsOneCloseWaitingPerClient) {
  ClientBook book({ClientRole::kActor}, Clock::now());
  EXPECT_FALSE(book.pending_close(0));
  book.SetPendingClose(0, 7);
  EXPECT_EQ(book.pending_close(0), 7u);
  EXPECT_EQ(book.TakePendingClose(0), 7u);
  EXPECT_FALSE(book.pending_close(0));
}

}  // namespace
}  // namespace perserve::service
