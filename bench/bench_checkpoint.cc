// perserve_bench_checkpoint: how long a checkpoint of a full table takes,
// and the longest the service loop is held by it, with intake running.
//
//   perserve_bench_checkpoint --size small|atari|atari-steps --capacity N --dir DIR [--out FILE]
//
// Fills a table of N steps and as many items (small: the system
// benchmark's 125-byte CartPole-like transitions; atari: transitions of two
// 84x84x4 frames; atari-steps: Ape-X's n-step items, n 3, over 84x84 frames
// stacked 4 deep, one item per step), then takes a checkpoint the way the
// server does: Begin, then one Step of the server's 2 ms budget a pass, and
// before each pass an append of 50 steps and their items (Prepare,
// BeforeWrite, Commit: intake that overwrites the ring and reuses item slots
// as fast as the loop goes). Reports the total time, the bytes, Begin's time
// and the longest pass (Begin, a Step, or an append with its BeforeWrite):
// the longest any request could wait because of the checkpoint. Then
// restores it into a second table and reports how long that took.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_schemas.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint/checkpoint.h"

namespace {

using Clock = std::chrono::steady_clock;
using perserve::Schema;
using perserve::replay::AppendRequest;
using perserve::replay::StepOptions;
using perserve::replay::StepReplay;

void Check(const perserve::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "perserve_bench_checkpoint: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr int64_t kBatch = 50;

// The table a size names: its options and step schema.
StepOptions OptionsFor(const std::string& size, int64_t capacity, bool prefault, Schema* schema) {
  StepOptions options;
  options.step_capacity = capacity;
  options.prefault = prefault;
  if (size == "atari-steps") {
    options.kind = StepOptions::Kind::kNStep;
    options.n_step = 3;
    options.discount = 0.99;
    options.stacks = {{"obs", 4}};
    *schema = perserve::bench::AtariStepSchema();
  } else {
    options.kind = StepOptions::Kind::kTransition;
    *schema = perserve::bench::SchemaFor(size);
  }
  return options;
}

std::unique_ptr<StepReplay> MakeTable(const std::string& size, int64_t capacity, bool prefault) {
  Schema schema;
  const StepOptions options = OptionsFor(size, capacity, prefault, &schema);
  std::unique_ptr<StepReplay> table;
  Check(StepReplay::Create(options, {capacity, 0.6, perserve::tree::Device::kCpu, 1, prefault}, schema, &table),
        "table");
  return table;
}

// Appends of kBatch steps to stream 0 (random bytes, no episode ends) with
// their items: each step itself (transitions), or every step whose n-step
// item the batch completes (t + 3 appended).
class Intake {
 public:
  explicit Intake(StepReplay* table) : table_(table), rng_(3) {
    bulk_.resize(static_cast<size_t>(kBatch * table->step_schema().ItemBytes()));
    for (auto& b : bulk_) b = static_cast<std::byte>(rng_() & 0xff);
    // No step ends an episode: the done column (the last, in AtariStepSchema and SchemaFor) all 0.
    const perserve::Schema& schema = table->step_schema();
    int64_t offset = 0;
    for (const perserve::Column& column : schema.columns) {
      if (column.name == "done") std::fill_n(bulk_.begin() + offset * kBatch, kBatch * column.ItemBytes(), std::byte{0});
      if (column.name == "reward") std::fill_n(bulk_.begin() + offset * kBatch, kBatch * column.ItemBytes(), std::byte{0});
      offset += column.ItemBytes();
    }
  }

  // Prepares the next append; `before` (a checkpoint's BeforeWrite) runs before it commits.
  template <class Before>
  void Append(Before&& before) {
    const int64_t first = table_->stream_steps(0);
    perserve::replay::TableItems items{0};
    if (table_->RowsAreSteps()) {
      items.item_per_step = true;
    } else {
      item_steps_.clear();
      for (int64_t t = std::max<int64_t>(0, first - 3); t <= first + kBatch - 4; ++t) item_steps_.push_back(t);
      items.item_steps = item_steps_;
    }
    priorities_.resize(static_cast<size_t>(items.count(kBatch)));
    for (double& p : priorities_) p = priority_(rng_);
    items.priorities = priorities_;
    const AppendRequest request{0, first, perserve::store::StepBatch{kBatch, bulk_, false}, {&items, 1}};
    Check(table_->Prepare(request), "prepare");
    before(table_->planned_item_slots());
    uint64_t first_key = 0;
    Check(table_->Commit(&first_key), "commit");
  }

 private:
  StepReplay* table_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> priority_{0.1, 2.0};
  std::vector<std::byte> bulk_;
  std::vector<int64_t> item_steps_;
  std::vector<double> priorities_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perserve checkpoint benchmark: write time and the longest stall of the service loop"};
  std::string size_name = "small", dir, out;
  int64_t capacity = int64_t{1} << 21;
  app.add_option("--size", size_name, "small, atari (transitions) or atari-steps (n-step 3, stack obs:4)")
      ->check(CLI::IsMember({"small", "atari", "atari-steps"}));
  app.add_option("--capacity", capacity, "steps in the ring and items in the table (filled)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "checkpoint directory (removed first)")->required();
  app.add_option("--out", out, "JSON result file");
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(dir);

  auto table = MakeTable(size_name, capacity, /*prefault=*/true);
  Intake intake(table.get());
  const auto fill_start = Clock::now();
  // The ring full and gone round once more: every item the table can hold whole is held.
  while (table->next_step_key() < static_cast<uint64_t>(capacity + kBatch)) intake.Append([](std::span<const int64_t>) {});
  const double step_gb = static_cast<double>(capacity * table->step_schema().ItemBytes()) / 1e9;
  std::fprintf(stderr, "filled %lld steps (%.2f GB), %lld items, in %.1f s\n", static_cast<long long>(capacity),
               step_gb, static_cast<long long>(table->items().size()), Seconds(Clock::now() - fill_start));

  perserve::service::CheckpointWriter writer(dir, 0, 1, capacity);
  const auto start = Clock::now();
  Check(writer.Begin(*table, perserve::service::CheckpointState{}), "begin");
  const double begin = Seconds(Clock::now() - start);
  double longest_pass = begin, longest_append = 0;
  int64_t passes = 0, appends = 0;
  bool done = false;
  while (!done) {
    const auto append_start = Clock::now();
    intake.Append([&](std::span<const int64_t>) {
      Check(writer.BeforeCommit(*table, kBatch), "before commit");
    });
    ++appends;
    longest_append = std::max(longest_append, Seconds(Clock::now() - append_start));
    const auto pass_start = Clock::now();
    Check(writer.Step(*table, std::chrono::microseconds(2000), &done), "step");
    longest_pass = std::max(longest_pass, Seconds(Clock::now() - pass_start));
    ++passes;
  }
  const double total = Seconds(Clock::now() - start);
  const double gb = static_cast<double>(writer.last_bytes()) / 1e9;

  auto restored = MakeTable(size_name, capacity, /*prefault=*/false);
  perserve::service::CheckpointState state;
  std::string loaded;
  const auto restore_start = Clock::now();
  Check(perserve::service::LoadCheckpoint(dir, 0, 1, restored.get(), &state, &loaded), "restore");
  const double restore = Seconds(Clock::now() - restore_start);

  const std::string json = fmt::format(
      "{{\"size\": \"{}\", \"steps\": {}, \"items\": {}, \"step_bytes\": {}, \"checkpoint_gb\": {:.3f}, "
      "\"write_seconds\": {:.3f}, \"write_gb_per_s\": {:.3f}, \"begin_ms\": {:.3f}, \"longest_pass_ms\": {:.3f}, "
      "\"longest_append_ms\": {:.3f}, \"passes\": {}, \"appends_during\": {}, \"restore_seconds\": {:.3f}}}\n",
      size_name, capacity, restored->items().size(), table->step_schema().ItemBytes(), gb, total, gb / total,
      1e3 * begin, 1e3 * longest_pass, 1e3 * longest_append, passes, appends, restore);
  perserve::bench::PrintJson(json, out);
  std::filesystem::remove_all(dir);
  return 0;
}
