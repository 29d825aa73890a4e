// The deterministic simulation in CI (simulator.h): many seeds, the seeds
// that once failed, and the proof that a seed's run is the same every time.
//
//   PERSERVE_SIM_SEED=<seed>        runs that seed alone (every test but it skips)
//   PERSERVE_SIM_SEEDS=<n>          how many seeds ManySeeds runs (default kSeedsInCi)
//   PERSERVE_SIM_FIRST_SEED=<seed>  where ManySeeds starts (default 1)
//   PERSERVE_SIM_SCHEDULES=<file>   ManySeeds writes a line per seed there: the seed, passed or
//                                   failed, its steps, replies, and the hex digests of its
//                                   replies and draws; equal in every build (two builds' are
//                                   compared by scripts/sim-portability.sh)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "common/coverage_marks.h"
#include "server/service/simulation/expected_marks.h"
#include "server/service/simulation/simulator.h"
#include "table/selector.h"

namespace perserve::service::simulation {
namespace {

// About 60-90 s on the 2-core CI machine (docs/testing.md has the rate).
constexpr uint64_t kSeedsInCi = 10000;
// A run of seeds 1 to at least this many (CI's: 10000, the sanitized
// build's 1000) must reach every timer and coverage mark it expects. Other
// ranges (the soak's chunks) may miss the rarest (SIGTERM's checkpoint
// waiting for another: 6 of seeds 1-1000), so they are not held to it.
constexpr uint64_t kSeedsForCoverage = 1000;

std::optional<uint64_t> SeedFromEnvironment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::strtoull(value, nullptr, 10);
}

// Runs `seed`; a failure names it and the command that runs it again.
void ExpectPasses(uint64_t seed) {
  const SimulationResult result = RunSimulation(seed);
  EXPECT_TRUE(result.passed) << "seed " << seed << " failed " << result.failure
                             << "\n  configuration: " << result.config << "\n  rerun: " << RerunCommand(seed);
}

// Prints every coverage mark's hits (common/coverage_marks.h), one a line;
// with `check`, a mark of kExpectedMarks never hit fails the test.
void ExpectCoverageMarksHit(bool check) {
  const std::map<std::string, int64_t> hits = CoverageMarkHits();
  std::cout << "  coverage marks (hits):\n";
  for (const auto& [name, count] : hits) std::cout << "    " << count << "  " << name << "\n";
  for (const std::string_view name : kExpectedMarks) {
    const auto hit = hits.find(std::string(name));
    if (hit != hits.end() && hit->second > 0) continue;
    std::cout << "    0  " << name << "\n";
    if (check) ADD_FAILURE() << "coverage mark never hit: " << name;
  }
}

class SimulationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    spdlog::set_level(spdlog::level::off);  // refusals log warnings by design
  }
  void SetUp() override { only_seed_ = SeedFromEnvironment("PERSERVE_SIM_SEED"); }
  std::optional<uint64_t> only_seed_;
};

TEST_F(SimulationTest, OneSeed) {
  if (!only_seed_) GTEST_SKIP() << "set PERSERVE_SIM_SEED to run one seed";
  ResetCoverageMarks();
  const SimulationResult result = RunSimulation(*only_seed_);
  std::cout << "seed " << *only_seed_ << ": " << result.config << "\n  " << result.steps << " steps, " << result.replies
            << " replies, " << result.deadlines_exceeded << " ended at their timeout, fingerprint " << std::hex
            << result.fingerprint << ", schedule " << result.schedule << std::dec << "\n";
  for (const auto& [name, hits] : CoverageMarkHits()) {
    if (hits > 0) std::cout << "  mark " << name << ": " << hits << "\n";
  }
  EXPECT_TRUE(result.passed) << "seed " << *only_seed_ << " failed " << result.failure;
}

TEST_F(SimulationTest, ManySeeds) {
  if (only_seed_) GTEST_SKIP() << "PERSERVE_SIM_SEED runs one seed";
  const uint64_t first = SeedFromEnvironment("PERSERVE_SIM_FIRST_SEED").value_or(1);
  const uint64_t seeds = SeedFromEnvironment("PERSERVE_SIM_SEEDS").value_or(kSeedsInCi);
  using Clock = std::chrono::steady_clock;
  ResetCoverageMarks();  // the other tests' hits are not these seeds'
  const auto start = Clock::now();
  int64_t steps = 0, failed = 0, ran = 0, deadlines = 0, batches = 0, exact = 0, lent = 0, blocked = 0;
  int64_t apart = 0, first_apart = 0;
  int64_t periodic = 0, periodic_seeds = 0, stats_lines = 0, stats_seeds = 0;
  StepCounts step_totals;
  int64_t restarts = 0, restarts_mid_operation = 0, restart_seeds = 0;  // crash-restarts
  int64_t table_seeds = 0, other_table_batches = 0;  // of services of several tables; the library's batches of them
  // By kind: one shard without the client library (as before), one shard with it, several shards; step streams.
  std::array<int64_t, 4> kind_seeds{};
  std::array<double, 4> kind_seconds{};
  std::ofstream schedules;
  if (const char* path = std::getenv("PERSERVE_SIM_SCHEDULES"); path != nullptr && *path != '\0') {
    schedules.open(path);
    ASSERT_TRUE(schedules) << "PERSERVE_SIM_SCHEDULES: cannot write " << path;
  }
  for (uint64_t seed = first; seed < first + seeds && failed < 5; ++seed, ++ran) {
    const auto began = Clock::now();
    const SimulationResult result = RunSimulation(seed);
    const size_t kind = result.step_streams ? 3 : result.shards > 1 ? 2 : result.library_clients > 0 ? 1 : 0;
    ++kind_seeds[kind];
    kind_seconds[kind] += std::chrono::duration<double>(Clock::now() - began).count();
    steps += result.steps;
    deadlines += result.deadlines_exceeded;
    batches += result.batches;
    exact += result.exact_batches;
    lent += result.lent_sends;
    blocked += result.blocked_calls;
    apart += result.columns_apart;
    first_apart += result.columns_first;
    step_totals.Add(result.step_counts);
    table_seeds += result.tables > 1;
    other_table_batches += result.other_table_batches;
    periodic += result.periodic_checkpoints;
    periodic_seeds += result.periodic_checkpoints > 0;
    stats_lines += result.stats_lines;
    stats_seeds += result.stats_lines > 0;
    restarts += result.restarts;
    restarts_mid_operation += result.restarts_mid_operation;
    restart_seeds += result.restarts > 0;
    if (!result.passed) ++failed;
    if (schedules.is_open()) {
      schedules << fmt::format("{} {} {} {} {:016x} {:016x}\n", seed, result.passed ? "passed" : "failed", result.steps,
                               result.replies, result.fingerprint, result.schedule);
    }
    EXPECT_TRUE(result.passed) << "seed " << seed << " failed " << result.failure
                               << "\n  configuration: " << result.config << "\n  rerun: " << RerunCommand(seed);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << ran << " seeds from " << first << " in " << seconds << " s: " << ran / seconds << " seeds/s, "
            << steps / seconds << " steps/s; " << deadlines << " requests ended at their timeout\n";
  std::cout << "  the client library: " << batches << " batches checked (" << exact
            << " against one replay of the union as it stood), " << lent << " lent sends read when received, "
            << blocked << " waits that ran the simulation\n";
  std::cout << "  " << apart << " appends' step columns sent apart (received into the ring), " << first_apart
            << " of them before their request\n";
  std::cout << "  step streams: " << step_totals.appends << " appends acknowledged, " << step_totals.refused
            << " refused for their flaws, " << step_totals.items << " items created, " << step_totals.drawn
            << " sampled items compared, " << step_totals.evicted << " items evicted with their steps, " << step_totals.pushed_out
            << " taken by the FIFO remover, " << step_totals.stale
            << " stale updates, " << step_totals.restored << " restored items compared ("
            << step_totals.restored_exact << " checkpoints restored as they began)\n";
  std::cout << "  timers on the simulation's clock: " << periodic << " periodic checkpoints asked for in "
            << periodic_seeds << " seeds, " << stats_lines << " stats lines checked in " << stats_seeds << " seeds\n";
  std::cout << "  crash-restarts: " << restarts << " in " << restart_seeds << " seeds (" << restarts_mid_operation
            << " at an operation of the file system, the rest between two steps), each restoring exactly the "
               "replay as its checkpoint began\n";
  const bool coverage = first == 1 && static_cast<uint64_t>(ran) >= kSeedsForCoverage;
  if (coverage) {
    EXPECT_GT(restarts_mid_operation, 0) << "no crash came at an operation of the file system";
    EXPECT_GT(restarts - restarts_mid_operation, 0) << "no crash came between two steps";
    EXPECT_GT(periodic_seeds, 0) << "no seed took a periodic checkpoint on the simulation's clock";
    EXPECT_GT(stats_seeds, 0) << "no seed logged a stats line on the simulation's clock";
  }
  ExpectCoverageMarksHit(coverage);
  std::cout << "  several tables: " << table_seeds << " seeds, " << other_table_batches
            << " library batches of a table but the default; draws checked against the reference's selector:";
  for (size_t kind = 0; kind < step_totals.drawn_by.size(); ++kind) {
    std::cout << (kind == 0 ? " " : ", ") << table::SelectorKindName(static_cast<table::SelectorKind>(kind)) << " "
              << step_totals.drawn_by[kind];
  }
  std::cout << "; " << step_totals.sampled_out << " items taken by their last draw (max_times_sampled), "
            << step_totals.lowest_removed << " by the lowest-priority remover, " << step_totals.selector_updates
            << " priorities updated in tables with selectors\n";
  // Every selector's draws, a queue's and the lowest-priority remover's takes, checked within a CI run's seeds.
  if (coverage) {
    for (size_t kind = 0; kind < step_totals.drawn_by.size(); ++kind) {
      EXPECT_GT(step_totals.drawn_by[kind], 0)
          << "no draw of a " << table::SelectorKindName(static_cast<table::SelectorKind>(kind)) << " table";
    }
    EXPECT_GT(step_totals.sampled_out, 0) << "no item left by max_times_sampled";
    EXPECT_GT(step_totals.lowest_removed, 0) << "no item taken by the lowest-priority remover";
    EXPECT_GT(step_totals.selector_updates, 0) << "no update of a table with selectors";
    EXPECT_GT(other_table_batches, 0) << "no library batch of a table but the default";
  }
  const char* kinds[] = {"one shard, raw clients", "one shard with library clients", "2-3 shards",
                         "step streams (1-3 shards)"};
  for (size_t kind = 0; kind < 4; ++kind) {
    std::cout << "  " << kinds[kind] << ": " << kind_seeds[kind] << " seeds, "
              << (kind_seconds[kind] > 0 ? kind_seeds[kind] / kind_seconds[kind] : 0.0) << " seeds/s\n";
  }
}

// Seeds that once failed, each with what it found. Features added since draw
// from a stream of their own (schedule_random.h), so these keep their
// schedules as far as the service's replies allow; each finding is also a
// unit test, which holds it whatever the simulation becomes.
TEST_F(SimulationTest, RegressionSeeds) {
  if (only_seed_) GTEST_SKIP() << "PERSERVE_SIM_SEED runs one seed";
  // An add apart refused on arrival took the columns of an earlier held add
  // (fixed by HeldAdds' ledger; ColumnsApartTest.ARefusedAddApartDropsItsOwnColumnsNotAnEarlierHeldAdds).
  ExpectPasses(3);
  // A checkpoint request answered after its client's close reply (also seed
  // 71, before shard samples joined): FinishClose now answers it first
  // (CheckpointServiceTest.ACloseAnswersTheClientsWaitingCheckpointRequestFirst).
  ExpectPasses(19);
  // SIGTERM's final checkpoint still being written when the last client
  // closed: the loop goes on until it is (done() false meanwhile), which the
  // simulation's end took for a hang (also seed 6334, with failing writes).
  ExpectPasses(4636);
  // Over shards, the only ready shard refused its part of a learner's sample
  // as never servable while another shard, its actor open, was not ready
  // yet: the ShardSampler drew again at once over no shard and failed
  // FAILED_PRECONDITION instead of waiting (also seeds 3885, 8998; fixed;
  // ShardSamplerLoopbackTest.ASampleWhoseOnlyReadyShardLeavesThePlanWaitsForAnotherToBeReady).
  ExpectPasses(3175);
}

TEST_F(SimulationTest, ASeedRunsTheSameEveryTime) {
  if (only_seed_) GTEST_SKIP() << "PERSERVE_SIM_SEED runs one seed";
  // One shard with raw clients; one with library clients (prefetch 2); two
  // and three shards with library actors lending their buffers and learners
  // sampling over the shards (exact totals, awaited raw samples on 4); step
  // streams: one shard raw (2-step), one with library clients (sequences),
  // three shards with a library actor's appends (4-step).
  for (const uint64_t seed : {3u, 17u, 4242u, 6u, 8u, 4u, 2u, 27u, 20u}) {
    const SimulationResult first = RunSimulation(seed), second = RunSimulation(seed);
    EXPECT_EQ(first.steps, second.steps) << "seed " << seed;
    EXPECT_EQ(first.replies, second.replies) << "seed " << seed;
    EXPECT_EQ(first.fingerprint, second.fingerprint) << "seed " << seed;
    EXPECT_EQ(first.failure, second.failure) << "seed " << seed;
  }
}

}  // namespace
}  // namespace perserve::service::simulation
