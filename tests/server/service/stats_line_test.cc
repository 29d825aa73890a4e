// The stats line and the summary, over a table's items (a Replay of its own).
#include "service/stats_line.h"

#include <gtest/gtest.h>

#include "server/replay/replay_test_util.h"

namespace perserve::service {
namespace {

using replay::replay_test::Ids;

std::unique_ptr<replay::Replay> MakeReplay(int64_t capacity) {
  return replay::replay_test::MakeReplay(replay::ReplayOptions{capacity, 1.0, tree::Device::kCpu, 3});
}

void AddItems(replay::Replay* replay, int64_t first, int64_t count) {
  uint64_t key = 0;
  ASSERT_TRUE(replay->Add(count, Ids(first, count), {}, &key).ok());
}

TEST(StatsLineTest, RatesAreSinceTheLastLine) {
  auto replay = MakeReplay(1000);
  StatsLine stats(2.0);
  const auto start = StatsLine::Clock::now();
  EXPECT_FALSE(stats.Due(start));
  EXPECT_TRUE(stats.Due(start + std::chrono::seconds(3)));
  AddItems(replay.get(), 0, 400);
  ServiceCounters counters;
  counters.errors = 5;
  (void)stats.Take(*replay, counters, start);
  AddItems(replay.get(), 400, 200);
  counters.errors = 7;
  const std::string line = stats.Take(*replay, counters, start + std::chrono::seconds(4));
  EXPECT_NE(line.find("size 600 | in 50 items/s"), std::string::npos) << line;
  EXPECT_NE(line.find("errors 2 |"), std::string::npos) << line;
  EXPECT_FALSE(StatsLine(0).Due(start + std::chrono::hours(1))) << "interval 0: never";
}

TEST(StatsLineTest, TheSummaryNamesTheRateLimiterOnlyWhenItIsOn) {
  auto replay = MakeReplay(10);
  ServiceCounters counters;
  EXPECT_EQ(Summary(*replay, counters, RateLimiter({})).find("rate limiter"), std::string::npos);
  EXPECT_NE(Summary(*replay, counters, RateLimiter({2.0, 10.0, 1})).find("rate limiter"), std::string::npos);
}

}  // namespace
}  // namespace perserve::service
