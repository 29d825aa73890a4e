// perserve_bench_tree: the priority tree's hot operations on a 2^21-leaf tree
// with random leaves, as Google Benchmark rows (JSON with --benchmark_out).
//
//   Descent/naive/512      512 descents one at a time (tree_algorithm.h's
//                          FindPrefixSumLeaf in a loop, no per-call overhead)
//   Descent/batched/512    the same 512 stratified masses through FindPrefixSum
//   Update/<strategy>/<k>  k random leaves set to random values
//
// bench/summarize_tree.py turns the JSON into ratios (batched vs naive, auto vs
// the fastest strategy at each k) and the crossover points.
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tree/cpu/cpu_priority_tree.h"

namespace perserve::tree {
namespace {

constexpr int64_t kCapacity = int64_t{1} << 21;
// Inputs rotate through pre-drawn sets: descents through kMassSets, updates
// through enough sets to cover as many leaves as the tree has, so an update
// row does not keep revisiting paths that a smaller pool would leave cached.
constexpr int kMassSets = 64;
int64_t UpdateSets(int64_t k) { return std::max<int64_t>(64, kCapacity / k); }

CpuPriorityTree& SharedTree() {
  static CpuPriorityTree* tree = [] {
    auto* t = new CpuPriorityTree(kCapacity);
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> value(0.01, 10.0);
    std::vector<int64_t> indices(kCapacity);
    std::vector<double> values(kCapacity);
    for (int64_t i = 0; i < kCapacity; ++i) {
      indices[i] = i;
      values[i] = value(rng);
    }
    t->SetStrategy(UpdateStrategy::kRebuild);
    if (!t->Update(indices, values).ok()) std::abort();
    benchmark::AddCustomContext("auto_table", t->DescribeAutoTable());  // measured here, outside any timing
    return t;
  }();
  return *tree;
}

// Stratified masses, as PER draws them: (i + u_i) * total / k.
std::vector<std::vector<double>> StratifiedMasses(double total, int k) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<double>> sets(kMassSets, std::vector<double>(k));
  for (auto& masses : sets) {
    for (int i = 0; i < k; ++i) masses[i] = (i + unit(rng)) * total / k;
  }
  return sets;
}

// Naive: one descent at a time with the lone-descent form of the algorithm
// (no per-call overhead). Batched: the whole batch through FindPrefixSum.
void Descent(benchmark::State& state, int k, bool batched) {
  CpuPriorityTree& tree = SharedTree();
  const auto sets = StratifiedMasses(tree.Total(), k);
  std::vector<int64_t> out(k);
  size_t set = 0;
  for (auto _ : state) {
    const std::vector<double>& masses = sets[set++ % kMassSets];
    if (batched) {
      if (!tree.FindPrefixSum(masses, out).ok()) state.SkipWithError("descent failed");
    } else {
      for (int i = 0; i < k; ++i) out[i] = FindPrefixSumLeaf(tree.nodes(), tree.capacity(), masses[i]);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * k);
}

void Update(benchmark::State& state, UpdateStrategy strategy, int64_t k) {
  CpuPriorityTree& tree = SharedTree();
  std::mt19937_64 rng(3 + k);
  std::uniform_int_distribution<int64_t> leaf(0, kCapacity - 1);
  std::uniform_real_distribution<double> value(0.01, 10.0);
  const int64_t sets = UpdateSets(k);
  std::vector<std::vector<int64_t>> index_sets(sets, std::vector<int64_t>(k));
  std::vector<std::vector<double>> value_sets(sets, std::vector<double>(k));
  for (int64_t s = 0; s < sets; ++s) {
    for (int64_t j = 0; j < k; ++j) {
      index_sets[s][j] = leaf(rng);
      value_sets[s][j] = value(rng);
    }
  }
  tree.SetStrategy(strategy);
  size_t set = 0;
  for (auto _ : state) {
    const size_t s = set++ % sets;
    if (!tree.Update(index_sets[s], value_sets[s]).ok()) state.SkipWithError("update failed");
  }
  state.SetItemsProcessed(state.iterations() * k);
}

void RegisterAll() {
  benchmark::RegisterBenchmark("Descent/naive/512", Descent, 512, false)->Unit(benchmark::kMicrosecond)->UseRealTime();
  benchmark::RegisterBenchmark("Descent/batched/512", Descent, 512, true)->Unit(benchmark::kMicrosecond)->UseRealTime();
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild, UpdateStrategy::kSparse,
                                  UpdateStrategy::kAuto}) {
    for (int64_t k : {8, 50, 512, 2048, 32768}) {
      const std::string name = "Update/" + std::string(UpdateStrategyName(strategy)) + "/" + std::to_string(k);
      benchmark::RegisterBenchmark(name.c_str(), Update, strategy, k)->Unit(benchmark::kMicrosecond)->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace perserve::tree

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  perserve::tree::RegisterAll();
  perserve::tree::SharedTree();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
