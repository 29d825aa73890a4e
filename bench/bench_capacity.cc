// perserve_bench_capacity: how much memory a replay of Atari n-step
// transitions takes when each frame is stored once (StepReplay, issue 27),
// and how long a sample's assembly from the step ring takes.
//
//   perserve_bench_capacity [--capacity N] [--episode 1000] [--sample] [--batch 512] [--repetitions 21]
//                           [--out FILE]
//
// Fills a StepReplay of N steps (default 2^21: the design's scale) from one
// actor stream: Atari steps (obs uint8 84x84, action int32, reward float32,
// done uint8) in requests of 64 steps, episodes of 1000 +- 100 steps,
// n-step 3 items over obs:4 stacks, one item per step (item capacity = N).
// Reports the process's resident memory (VmRSS) before and after, bytes per
// transition, the frames' own bytes (N * 84 * 84) and RSS / frame bytes,
// beside what a transition costs today (a Replay whose obs and next_obs are
// 84x84x4 stacks, computed from its schema, not allocated) and in Dopamine
// (one frame a step and its small columns). With --sample, times Assemble of
// a batch of prioritized draws (median of repetitions) against one memcpy of
// the same output bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_schemas.h"

#include "replay/replay.h"
#include "replay/step_replay.h"

namespace {

using Clock = std::chrono::steady_clock;
using perserve::Column;
using perserve::DType;
using perserve::Schema;
using perserve::Status;
using perserve::replay::Replay;
using perserve::replay::StepOptions;
using perserve::replay::StepReplay;

void Check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "perserve_bench_capacity: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// VmRSS from /proc/self/status, in bytes (0 where it cannot be read).
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

constexpr int64_t kFrameBytes = 84 * 84;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perserve capacity benchmark: Atari n-step transitions over step streams, each frame stored once"};
  int64_t capacity = int64_t{1} << 21, episode = 1000, batch = 512, repetitions = 21;
  bool sample = false;
  std::string out;
  app.add_option("--capacity", capacity, "steps in the ring (and items in the tree), filled")
      ->check(CLI::PositiveNumber);
  app.add_option("--episode", episode, "mean episode length (+- 10%)")->check(CLI::PositiveNumber);
  app.add_flag("--sample", sample, "also time Assemble of a batch of sampled items");
  app.add_option("--batch", batch, "items a sample assembles")->check(CLI::PositiveNumber);
  std::vector<int> threads{1, 2};
  app.add_option("--threads", threads, "assembly threads to time, each in turn (default 1 2)")
      ->check(CLI::PositiveNumber);
  app.add_option("--repetitions", repetitions, "timed assemblies (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out, "JSON result file");
  CLI11_PARSE(app, argc, argv);

  const Schema step_schema = perserve::bench::AtariStepSchema();
  StepOptions options;
  options.n_step = 3;
  options.stacks = {{"obs", 4}};
  options.step_capacity = capacity;
  const int64_t rss_before = ResidentBytes();

  std::unique_ptr<StepReplay> steps;
  Check(StepReplay::Create(options, {capacity, 0.6, perserve::tree::Device::kCpu, 1}, step_schema, &steps),
        "step replay");
  Replay* items = &steps->mutable_items();

  // Requests of 64 steps; an item at t goes with the request that makes it
  // creatable (t+3 appended, or its episode ended by t+2).
  constexpr int64_t kRequest = 64;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> length(episode - episode / 10, episode + episode / 10);
  std::vector<std::byte> bulk(static_cast<size_t>(kRequest * step_schema.ItemBytes()));
  for (auto& b : bulk) b = static_cast<std::byte>(rng() & 0xff);
  std::vector<bool> done_at;  // per stream index
  int64_t episode_left = length(rng), appended = 0, next_item = 0;
  std::vector<int64_t> item_steps;
  const auto fill_start = Clock::now();
  while (appended < capacity) {
    const int64_t count = std::min(kRequest, capacity - appended);
    // The wire layout of `count` steps: obs, action, reward, done, each column's rows together.
    std::byte* const done_column = bulk.data() + count * (kFrameBytes + 4 + 4);
    for (int64_t j = 0; j < count; ++j) {
      bulk[static_cast<size_t>(j * kFrameBytes)] = static_cast<std::byte>(appended + j);  // frames differ
      const bool done = --episode_left == 0;
      if (done) episode_left = length(rng);
      done_column[j] = done ? std::byte{1} : std::byte{0};
      done_at.push_back(done);
    }
    const int64_t have = appended + count;
    item_steps.clear();
    for (; next_item < have; ++next_item) {
      bool whole = next_item + options.n_step < have;
      for (int64_t i = next_item; !whole && i < std::min(have, next_item + options.n_step); ++i) whole = done_at[i];
      if (!whole) break;
      item_steps.push_back(next_item);
    }
    uint64_t first_key = 0;
    const std::span<const std::byte> columns(bulk.data(), static_cast<size_t>(count * step_schema.ItemBytes()));
    Check(steps->Append(0, appended, count, columns, item_steps, {}, {}, &first_key), "append");
    appended = have;
  }
  const double fill_seconds = Seconds(Clock::now() - fill_start);
  const int64_t rss_after = ResidentBytes();
  const int64_t transitions = items->size();
  const double frame_bytes = static_cast<double>(capacity) * kFrameBytes;

  // Today: a Replay of whole transitions, obs and next_obs 84x84x4 stacks
  // (bench_schemas.h's atari, with int32 actions as here), plus its tree's
  // sum and min nodes (2 x 2 doubles a leaf).
  const Schema today{{{"obs", DType::kUInt8, {84, 84, 4}},
                      {"next_obs", DType::kUInt8, {84, 84, 4}},
                      {"action", DType::kInt32, {}},
                      {"reward", DType::kFloat32, {}},
                      {"done", DType::kUInt8, {}}}};
  const int64_t today_bytes = today.ItemBytes() + 32;
  // Dopamine's OutOfGraphReplayBuffer: per step one 84x84 uint8 observation,
  // an int32 action, a float32 reward and a uint8 terminal; the prioritized
  // one adds its sum tree (float64 nodes, about 2 a leaf).
  const int64_t dopamine_bytes = kFrameBytes + 4 + 4 + 1;
  const int64_t dopamine_prioritized_bytes = dopamine_bytes + 16;

  std::string sample_json;
  if (sample) {
    std::vector<std::byte> output(static_cast<size_t>(batch * steps->SampleItemBytes()));
    std::vector<std::byte> source(output.size());
    std::memset(output.data(), 1, output.size());
    std::memset(source.data(), 2, source.size());
    perserve::replay::SampleResult drawn;
    // Per thread count, interleaved (this machine drifts): the assembly's
    // median, and a memcpy of the same bytes beside each.
    std::vector<std::vector<double>> assemble(threads.size());
    std::vector<double> draw, copy;
    std::vector<std::byte> reference(output.size());
    for (int64_t r = 0; r < repetitions; ++r) {
      const auto draw_start = Clock::now();
      Check(items->Sample(batch, 0.4, &drawn), "sample");
      draw.push_back(Seconds(Clock::now() - draw_start));
      for (size_t t = 0; t < threads.size(); ++t) {
        steps->SetAssemblyThreads(threads[t]);
        const auto assemble_start = Clock::now();
        steps->Assemble(drawn.slots, output);
        assemble[t].push_back(Seconds(Clock::now() - assemble_start));
        // Every thread count writes the same bytes.
        if (t == 0) std::memcpy(reference.data(), output.data(), output.size());
        if (std::memcmp(reference.data(), output.data(), output.size()) != 0) {
          Check(Status::Internal("the assemblies differ by thread count"), "assemble");
        }
      }
      const auto copy_start = Clock::now();
      std::memcpy(output.data(), source.data(), output.size());
      copy.push_back(Seconds(Clock::now() - copy_start));
    }
    const double copy_s = Median(copy);
    std::string rows;
    for (size_t t = 0; t < threads.size(); ++t) {
      const double assemble_s = Median(assemble[t]);
      rows += fmt::format("{}{{\"threads\": {}, \"assemble_ms\": {:.3f}, \"assemble_gb_per_s\": {:.2f}, "
                          "\"assemble_over_memcpy\": {:.2f}, \"speedup_over_one\": {:.2f}}}",
                          t == 0 ? "" : ", ", threads[t], 1e3 * assemble_s, output.size() / assemble_s / 1e9,
                          assemble_s / copy_s, Median(assemble[0]) / assemble_s);
    }
    sample_json = fmt::format(
        ", \"sample\": {{\"batch\": {}, \"repetitions\": {}, \"reply_bytes\": {}, \"draw_ms\": {:.3f}, "
        "\"memcpy_ms\": {:.3f}, \"assembly\": [{}]}}",
        batch, repetitions, output.size(), 1e3 * Median(draw), 1e3 * copy_s, rows);
  }

  const std::string json = fmt::format(
      "{{\"capacity_steps\": {}, \"transitions\": {}, \"episode\": {}, \"fill_seconds\": {:.1f}, "
      "\"rss_before_bytes\": {}, \"rss_after_bytes\": {}, \"rss_gb\": {:.3f}, \"frame_bytes\": {:.0f}, "
      "\"frame_gb\": {:.3f}, \"rss_over_frame_bytes\": {:.4f}, \"bytes_per_transition\": {:.1f}, "
      "\"sample_item_bytes\": {}, \"today_bytes_per_transition\": {}, \"today_gb\": {:.1f}, "
      "\"dopamine_bytes_per_transition\": {}, \"dopamine_prioritized_bytes_per_transition\": {}{}}}\n",
      capacity, transitions, episode, fill_seconds, rss_before, rss_after, rss_after / 1e9, frame_bytes,
      frame_bytes / 1e9, rss_after / frame_bytes,
      static_cast<double>(rss_after - rss_before) / static_cast<double>(transitions), steps->SampleItemBytes(),
      today_bytes, static_cast<double>(today_bytes) * static_cast<double>(capacity) / 1e9, dopamine_bytes,
      dopamine_prioritized_bytes, sample_json);
  perserve::bench::PrintJson(json, out);
  return 0;
}
