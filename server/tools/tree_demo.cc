// perserve_tree_demo: builds a priority tree, fills it, then runs the replay
// rank's hot loop (stratified sample, priority update) and prints what it saw.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tree/cpu/cpu_priority_tree.h"
#include "tree/priority_tree.h"

namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

int Fail(const perserve::Status& status) {
  fmt::print(stderr, "perserve_tree_demo: {}\n", status.ToString());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perserve priority tree demo: fill, sample, update, report"};
  int64_t capacity = perserve::tree::PriorityTree::kDefaultCapacity;
  int64_t batch = 512;
  int iterations = 2000;
  std::string device = "auto";
  std::string strategy = "auto";
  app.add_option("--capacity", capacity, "leaves (rounded up to a power of two)")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sample / update batch size")->check(CLI::PositiveNumber);
  app.add_option("--iterations", iterations, "sample+update rounds")->check(CLI::PositiveNumber);
  app.add_option("--device", device, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--strategy", strategy, "update strategy")
      ->check(CLI::IsMember({"auto", "per_element", "rebuild", "sparse"}));
  CLI11_PARSE(app, argc, argv);

  perserve::tree::Device parsed_device;
  perserve::tree::UpdateStrategy parsed_strategy;
  perserve::Status status = perserve::tree::ParseDevice(device, &parsed_device);
  if (status.ok()) status = perserve::tree::ParseUpdateStrategy(strategy, &parsed_strategy);
  std::unique_ptr<perserve::tree::PriorityTree> tree;
  if (status.ok()) status = perserve::tree::PriorityTree::Create(capacity, parsed_device, &tree);
  if (!status.ok()) return Fail(status);
  tree->SetStrategy(parsed_strategy);
  const int64_t leaves = tree->capacity();
  fmt::print("tree: {} leaves on {}, strategy {}\n", leaves, tree->device_name(), strategy);

  if (auto* cpu = dynamic_cast<perserve::tree::CpuPriorityTree*>(tree.get())) {
    const auto calibration_start = Clock::now();
    const std::string table = cpu->DescribeAutoTable();  // measured on first use
    fmt::print("auto strategy: crossovers measured on this machine in {:.0f} ms (median update time per batch size k):\n{}",
               MicrosSince(calibration_start) / 1e3, table);
  }

  // Fill every leaf in intake-sized batches, priorities^0.6 as PER would store them.
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> priority(0.01, 10.0);
  std::vector<int64_t> indices;
  std::vector<double> values;
  auto start = Clock::now();
  for (int64_t first = 0; first < leaves; first += 50) {
    indices.clear();
    values.clear();
    for (int64_t i = first; i < std::min(leaves, first + 50); ++i) {
      indices.push_back(i);
      values.push_back(std::pow(priority(rng), 0.6));
    }
    if (status = tree->Update(indices, values); !status.ok()) return Fail(status);
  }
  fmt::print("fill: {} leaves in batches of 50, {:.1f} ms; total {:.6g}, min {:.6g}\n", leaves,
             MicrosSince(start) / 1e3, tree->Total(), tree->Min());

  // Proportional sampling, checked: the share of draws that land on leaves
  // above a threshold against the exact share those leaves hold of the total.
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> masses(static_cast<size_t>(batch));
  std::vector<int64_t> drawn(static_cast<size_t>(batch));
  std::vector<double> fresh(static_cast<size_t>(batch));
  auto stratified = [&] {
    const double total = tree->Total();
    for (int64_t i = 0; i < batch; ++i) masses[i] = (static_cast<double>(i) + unit(rng)) * total / batch;
  };
  const double threshold = std::pow(5.0, 0.6);
  std::vector<int64_t> all(static_cast<size_t>(leaves));
  std::vector<double> all_values(static_cast<size_t>(leaves));
  for (int64_t i = 0; i < leaves; ++i) all[i] = i;
  if (status = tree->Get(all, all_values); !status.ok()) return Fail(status);
  double above = 0.0;
  for (double v : all_values) above += v > threshold ? v : 0.0;
  const int check_rounds = 200;
  int64_t drawn_above = 0;
  for (int round = 0; round < check_rounds; ++round) {
    stratified();
    if (status = tree->FindPrefixSum(masses, drawn); !status.ok()) return Fail(status);
    if (status = tree->Get(drawn, fresh); !status.ok()) return Fail(status);
    for (double v : fresh) drawn_above += v > threshold;
  }
  fmt::print("sampling check: {:.4f} of {} draws hit priorities > 5; they hold {:.4f} of the total\n",
             static_cast<double>(drawn_above) / (check_rounds * batch), check_rounds * batch, above / tree->Total());

  // The learner loop: stratified masses, descent, new priorities for what was drawn.
  double sample_us = 0.0, update_us = 0.0;
  for (int it = 0; it < iterations; ++it) {
    stratified();
    start = Clock::now();
    if (status = tree->FindPrefixSum(masses, drawn); !status.ok()) return Fail(status);
    sample_us += MicrosSince(start);
    for (double& v : fresh) v = std::pow(priority(rng), 0.6);
    start = Clock::now();
    if (status = tree->Update(drawn, fresh); !status.ok()) return Fail(status);
    update_us += MicrosSince(start);
  }
  fmt::print("{} rounds of {}: sample {:.1f} us/batch, update {:.1f} us/batch\n", iterations, batch,
             sample_us / iterations, update_us / iterations);
  fmt::print("final total {:.6g}, min {:.6g}\n", tree->Total(), tree->Min());
  return 0;
}
