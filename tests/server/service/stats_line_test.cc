#include "service/stats_line.h"

#include <gtest/gtest.h>

#include "server/service/checkpoint/checkpoint_test_util.h"

namespace perserve::service {
namespace {

TEST(StatsLineTest, RatesAreSinceTheLastLine) {
  std::mt19937_64 rng(3);
  auto replay = checkpoint_test::MakeReplay(1000);
  StatsLine stats(2.0);
  const auto start = StatsLine::Clock::now();
  EXPECT_FALSE(stats.Due(start));
  EXPECT_TRUE(stats.Due(start + std::chrono::seconds(3)));
  checkpoint_test::AddItems(replay.get(), 0, 400, &rng);
  ServiceCounters counters;
  counters.errors = 5;
  (void)stats.Take(*replay, counters, start);
  checkpoint_test::AddItems(replay.get(), 400, 200, &rng);
  counters.errors = 7;
  const std::string line = stats.Take(*replay, counters, start + std::chrono::seconds(4));
  EXPECT_NE(line.find("size 600 | in 50 items/s"), std::string::npos) << line;
  EXPECT_NE(line.find("errors 2 |"), std::string::npos) << line;
  EXPECT_FALSE(StatsLine(0).Due(start + std::chrono::hours(1))) << "interval 0: never";
}

TEST(StatsLineTest, TheSummaryNamesTheRateLimiterOnlyWhenItIsOn) {
  auto replay = checkpoint_test::MakeReplay(10);
  ServiceCounters counters;
  EXPECT_EQ(Summary(*replay, counters, RateLimiter({})).find("rate limiter"), std::string::npos);
  EXPECT_NE(Summary(*replay, counters, RateLimiter({2.0, 10.0, 1})).find("rate limiter"), std::string::npos);
}

}  // namespace
}  // namespace perserve::service
