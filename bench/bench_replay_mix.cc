// perserve_bench_replay_mix: a learner's and actors' mix on one full Replay,
// in process, with no service around it.
//
//   perserve_bench_replay_mix [--capacity 2097152] [--mixes 200] [--repeats 5]
//                             [--sampler prioritized] [--lowest-priority-remover]
//                             [--max-times-sampled 0]
//
// Fills the replay to capacity (priorities uniform in [0.01, 10)), then times
// `mixes` rounds of: 4 adds of 50 items, a sample of 512 and an update of the
// 512 drawn keys (skipped where the sampler takes no updates), and prints the
// microseconds a mix takes, min and median over `repeats`. A measurement
// tool only: no test runs it, and nothing checks a speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "replay/replay.h"

namespace {

using perserve::Status;
using perserve::replay::Replay;
using perserve::replay::ReplayOptions;

void Check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "perserve_bench_replay_mix: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A mix of adds, samples and updates on one in-process Replay"};
  int64_t capacity = int64_t{1} << 21;
  int mixes = 200;
  int repeats = 5;
  std::string sampler = "prioritized";
  bool lowest_priority_remover = false;
  int64_t max_times_sampled = 0;
  app.add_option("--capacity", capacity)->check(CLI::PositiveNumber);
  app.add_option("--mixes", mixes)->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  app.add_option("--sampler", sampler);
  app.add_flag("--lowest-priority-remover", lowest_priority_remover);
  app.add_option("--max-times-sampled", max_times_sampled)->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  ReplayOptions options{capacity, 0.6, perserve::tree::Device::kCpu, 0x5eed};
  Check(perserve::table::ParseSelectorKind(sampler, &options.sampler), "--sampler");
  if (lowest_priority_remover) options.remover = perserve::replay::RemoverKind::kLowestPriorityFirst;
  options.max_times_sampled = max_times_sampled;
  const perserve::Schema schema{{{"key", perserve::DType::kInt64, {}}}};
  std::unique_ptr<Replay> replay;
  Check(Replay::Create(options, schema, &replay), "create");

  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> priority(0.01, 10.0);
  constexpr int64_t kAdd = 50, kBatch = 512;
  std::vector<std::byte> rows(static_cast<size_t>(kAdd) * sizeof(int64_t));
  std::vector<double> priorities(kAdd);
  uint64_t first = 0;
  const auto add = [&] {
    for (double& p : priorities) p = priority(random);
    Check(replay->Add(kAdd, rows, priorities, &first), "add");
  };
  while (replay->size() + kAdd <= capacity) add();
  const bool updates = options.sampler == perserve::table::SelectorKind::kPrioritized ||
                       options.sampler == perserve::table::SelectorKind::kMaxHeap ||
                       options.sampler == perserve::table::SelectorKind::kMinHeap;
  perserve::replay::SampleResult sample;
  perserve::replay::UpdateCounts counts;
  std::vector<double> updated(kBatch);
  std::vector<double> micros;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    for (int mix = 0; mix < mixes; ++mix) {
      for (int j = 0; j < 4; ++j) add();
      Check(replay->Sample(kBatch, 0.4, &sample), "sample");
      if (!updates) continue;
      for (double& p : updated) p = priority(random);
      Check(replay->UpdatePriorities(sample.keys, updated, &counts), "update");
    }
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    micros.push_back(took.count() / mixes);
  }
  std::sort(micros.begin(), micros.end());
  fmt::print("{{\"capacity\": {}, \"sampler\": \"{}\", \"lowest_priority_remover\": {}, \"max_times_sampled\": {}, "
             "\"mix_us_min\": {:.1f}, \"mix_us_median\": {:.1f}}}\n",
             capacity, sampler, lowest_priority_remover, max_times_sampled, micros.front(),
             micros[micros.size() / 2]);
  return 0;
}
