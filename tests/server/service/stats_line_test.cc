// The stats line and the summary, over a replay of one table and of several.
#include "service/stats_line.h"

#include <gtest/gtest.h>

#include "server/replay/step_test_util.h"

namespace perserve::service {
namespace {

using replay::StepReplay;
using replay::TableConfig;
using replay::TableItems;

// Tables of transitions over a ring of `capacity` int64 ids, one stream.
std::unique_ptr<StepReplay> MakeReplay(int64_t capacity, std::vector<std::string> names = {"default"}) {
  std::vector<TableConfig> tables;
  for (const std::string& name : names) {
    TableConfig table;
    table.name = name;
    table.layout.kind = replay::StepOptions::Kind::kTransition;
    table.layout.step_capacity = capacity;
    table.items = replay::ReplayOptions{capacity, 1.0, tree::Device::kCpu, 3};
    tables.push_back(table);
  }
  std::unique_ptr<StepReplay> replay;
  EXPECT_TRUE(StepReplay::Create(tables, Schema{{{"id", DType::kInt64, {}}}}, &replay).ok());
  return replay;
}

// `count` steps, each an item of table `table`.
void AddItems(StepReplay* replay, int64_t first, int64_t count, int table = 0) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[static_cast<size_t>(i)] = first + i;
  const TableItems add{table, true};
  uint64_t key = 0;
  ASSERT_TRUE(replay->Append(replay::AppendRequest{0, replay::AppendRequest::kAtEnd,
                                                   store::StepBatch{count, std::as_bytes(std::span(ids)), false},
                                                   {&add, 1}},
                             &key)
                  .ok());
}

TEST(StatsLineTest, RatesAreSinceTheLastLine) {
  auto replay = MakeReplay(1000);
  // Any clock's time: the service's (a simulation's starts where it likes).
  const auto start = StatsLine::Clock::time_point{} + std::chrono::hours(1);
  StatsLine stats(2.0, start);
  EXPECT_FALSE(stats.Due(start));
  EXPECT_FALSE(stats.Due(start + std::chrono::milliseconds(1999)));
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
  EXPECT_FALSE(StatsLine(0, start).Due(start + std::chrono::hours(1))) << "interval 0: never";
}

TEST(StatsLineTest, SeveralTablesEachGetTheirCounts) {
  auto replay = MakeReplay(1000, {"apex", "eval"});
  const auto start = StatsLine::Clock::now();
  StatsLine stats(2.0, start);
  ServiceCounters counters;
  (void)stats.Take(*replay, counters, start);
  AddItems(replay.get(), 0, 400, 0);
  AddItems(replay.get(), 400, 100, 1);
  const std::string line = stats.Take(*replay, counters, start + std::chrono::seconds(4));
  EXPECT_NE(line.find("tables: apex size 400 in 100/s"), std::string::npos) << line;
  EXPECT_NE(line.find("; eval size 100 in 25/s"), std::string::npos) << line;
  const std::string summary = Summary(*replay, counters, {RateLimiter({}), RateLimiter({2.0, 10.0, 1})});
  EXPECT_NE(summary.find("table apex: size 400 of 1000, 400 items in"), std::string::npos) << summary;
  EXPECT_NE(summary.find("table eval: size 100 of 1000, 100 items in, 0 sampled, 0 priorities updated, 0 stale "
                         "updates dropped, 0 bad priorities dropped, rate limiter"),
            std::string::npos)
      << summary;
}

TEST(StatsLineTest, TheSummaryNamesTheRateLimiterOnlyWhenItIsOn) {
  auto replay = MakeReplay(10);
  ServiceCounters counters;
  EXPECT_EQ(Summary(*replay, counters, {RateLimiter({})}).find("rate limiter"), std::string::npos);
  EXPECT_NE(Summary(*replay, counters, {RateLimiter({2.0, 10.0, 1})}).find("rate limiter"), std::string::npos);
}

}  // namespace
}  // namespace perserve::service
