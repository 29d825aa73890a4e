// perserve_bench_checkpoint: how long a checkpoint of a full replay takes,
// and the longest the service loop is held by it, with intake running.
//
//   perserve_bench_checkpoint --size small|atari --capacity N --dir DIR [--out FILE]
//
// Fills a replay of N items (small: the system benchmark's 125-byte
// CartPole-like transitions; atari: two 84x84x4 frames), then takes a
// checkpoint the way the server does: Begin, then one Step of the server's
// 2 ms budget a pass, and before each pass an add of 50 items (BeforeAdd
// first: intake that overwrites the ring as fast as the loop goes). Reports
// the total time, the bytes and the longest pass (Begin, a Step, or an add's
// BeforeAdd): the longest any request could wait because of the checkpoint.
// Then restores it into a second replay and reports how long that took.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_schemas.h"
#include "replay/replay.h"
#include "service/checkpoint/checkpoint.h"

namespace {

using Clock = std::chrono::steady_clock;
using perserve::Schema;
using perserve::bench::SchemaFor;

void Check(const perserve::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "perserve_bench_checkpoint: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perserve checkpoint benchmark: write time and the longest stall of the service loop"};
  std::string size_name = "small", dir, out;
  int64_t capacity = int64_t{1} << 21;
  app.add_option("--size", size_name, "small or atari")->check(CLI::IsMember({"small", "atari"}));
  app.add_option("--capacity", capacity, "items in the replay (filled)")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "checkpoint directory (removed first)")->required();
  app.add_option("--out", out, "JSON result file");
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(dir);

  const Schema schema = SchemaFor(size_name);
  std::unique_ptr<perserve::replay::Replay> replay;
  Check(perserve::replay::Replay::Create({capacity, 0.6, perserve::tree::Device::kCpu, 1, true}, schema, &replay),
        "replay");
  constexpr int64_t kBatch = 50;
  std::vector<std::byte> bulk(static_cast<size_t>(kBatch * schema.ItemBytes()));
  std::mt19937_64 rng(3);
  for (auto& b : bulk) b = static_cast<std::byte>(rng() & 0xff);
  std::vector<double> priorities(kBatch);
  std::uniform_real_distribution<double> priority(0.1, 2.0);
  auto add = [&] {
    for (double& p : priorities) p = priority(rng);
    uint64_t first_key = 0;
    Check(replay->Add(kBatch, bulk, priorities, &first_key), "add");
  };
  const auto fill_start = Clock::now();
  while (replay->size() < capacity) add();
  std::fprintf(stderr, "filled %lld items (%.2f GB) in %.1f s\n", static_cast<long long>(capacity),
               capacity * schema.ItemBytes() / 1e9, Seconds(Clock::now() - fill_start));

  perserve::service::CheckpointWriter writer(dir, 0, 1, capacity);
  perserve::service::CheckpointState state;
  state.schema = schema.ToString();
  state.capacity = capacity;
  state.alpha = replay->alpha();
  state.replay = replay->State();
  const auto start = Clock::now();
  const auto begin_start = Clock::now();
  Check(writer.Begin(*replay, state), "begin");
  const double begin = Seconds(Clock::now() - begin_start);
  double longest_pass = begin, longest_add = 0;
  int64_t passes = 0, adds = 0;
  bool done = false;
  while (!done) {
    const auto add_start = Clock::now();
    Check(writer.BeforeAdd(*replay, kBatch), "before add");
    add();
    ++adds;
    longest_add = std::max(longest_add, Seconds(Clock::now() - add_start));
    const auto pass_start = Clock::now();
    Check(writer.Step(*replay, std::chrono::microseconds(2000), &done), "step");
    longest_pass = std::max(longest_pass, Seconds(Clock::now() - pass_start));
    ++passes;
  }
  const double total = Seconds(Clock::now() - start);
  const double gb = writer.last_bytes() / 1e9;

  auto restored_replay = std::unique_ptr<perserve::replay::Replay>();
  Check(perserve::replay::Replay::Create({capacity, 0.6, perserve::tree::Device::kCpu, 1, false}, schema,
                                         &restored_replay),
        "replay");
  perserve::service::CheckpointState restored;
  std::string loaded;
  const auto restore_start = Clock::now();
  Check(perserve::service::LoadCheckpoint(dir, 0, 1, restored_replay.get(), &restored, &loaded), "restore");
  const double restore = Seconds(Clock::now() - restore_start);

  const std::string json = fmt::format(
      "{{\"size\": \"{}\", \"items\": {}, \"item_bytes\": {}, \"checkpoint_gb\": {:.3f}, \"write_seconds\": {:.3f}, "
      "\"write_gb_per_s\": {:.3f}, \"begin_ms\": {:.3f}, \"longest_pass_ms\": {:.3f}, \"longest_add_ms\": {:.3f}, "
      "\"passes\": {}, "
      "\"adds_during\": {}, \"restore_seconds\": {:.3f}}}\n",
      size_name, capacity, schema.ItemBytes(), gb, total, gb / total, 1e3 * begin, 1e3 * longest_pass,
      1e3 * longest_add, passes,
      adds, restore);
  perserve::bench::PrintJson(json, out);
  std::filesystem::remove_all(dir);
  return 0;
}
