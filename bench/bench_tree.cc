// perserve_bench_tree: the priority tree's hot operations on a 2^21-leaf tree
// with random leaves, as Google Benchmark rows (JSON with --benchmark_out).
//
//   Descent/naive/512      512 descents one at a time (tree_algorithm.h's
//                          FindPrefixSumLeaf in a loop, no per-call overhead)
//   Descent/batched/512    the same 512 stratified masses through FindPrefixSum
//   Update/<strategy>/<k>  k random leaves set to random values
//   Sample/cpu/<B>         B stratified draws through the tree's own Sample()
//                          (masses, descents and leaf values)
//   Sample/cuda/<B>        the same on the CUDA tree: Philox masses, descents
//                          and values in one kernel, host-visible on return
//   Descent/cuda/<B>       B host masses through FindPrefixSum on the CUDA tree
//   Update/cuda/<k>        k random leaves through the CUDA tree's "auto"
//
// CPU and CUDA rows describe the same 2^21-leaf tree (same leaves) in one run;
// without a usable CUDA device the CUDA rows are skipped with the reason.
// Every row is wall time as the calling host thread sees it.
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
#include "tree/cuda/cuda_device.h"

namespace perserve::tree {
namespace {

constexpr int64_t kCapacity = int64_t{1} << 21;
// Inputs rotate through pre-drawn sets: descents through kMassSets, updates
// through enough sets to cover as many leaves as the tree has, so an update
// row does not keep revisiting paths that a smaller pool would leave cached.
constexpr int kMassSets = 64;
int64_t UpdateSets(int64_t k) { return std::max<int64_t>(64, kCapacity / k); }

// Every leaf random, as in a full replay buffer; the same leaves on each device.
void FillRandom(PriorityTree* tree) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> value(0.01, 10.0);
  std::vector<int64_t> indices(kCapacity);
  std::vector<double> values(kCapacity);
  for (int64_t i = 0; i < kCapacity; ++i) {
    indices[i] = i;
    values[i] = value(rng);
  }
  tree->SetStrategy(UpdateStrategy::kRebuild);
  if (!tree->Update(indices, values).ok()) std::abort();
  tree->SetStrategy(UpdateStrategy::kAuto);
}

CpuPriorityTree& SharedTree() {
  static CpuPriorityTree* tree = [] {
    auto* t = new CpuPriorityTree(kCapacity);
    FillRandom(t);
    benchmark::AddCustomContext("auto_table", t->DescribeAutoTable());  // measured here, outside any timing
    return t;
  }();
  return *tree;
}

// The CUDA tree, or nullptr with the reason in *why.
PriorityTree* SharedCudaTree(std::string* why) {
  static std::string reason;
  static PriorityTree* tree = [] {
    std::unique_ptr<PriorityTree> t;
    const Status status = PriorityTree::Create(kCapacity, Device::kCuda, &t);
    if (!status.ok()) {
      reason = status.ToString();
      return static_cast<PriorityTree*>(nullptr);
    }
    FillRandom(t.get());
    benchmark::AddCustomContext("cuda_auto_table", t->DescribeAutoTable());
    return t.release();
  }();
  *why = reason;
  return tree;
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
// (no per-call overhead; the CPU tree). Batched: the whole batch through
// FindPrefixSum, on either device's tree.
void Descent(benchmark::State& state, PriorityTree* tree, int k, bool batched) {
  const auto sets = StratifiedMasses(tree->Total(), k);
  std::vector<int64_t> out(k);
  size_t set = 0;
  for (auto _ : state) {
    const std::vector<double>& masses = sets[set++ % kMassSets];
    if (batched) {
      if (!tree->FindPrefixSum(masses, out).ok()) state.SkipWithError("descent failed");
    } else {  // the CPU tree's nodes, one descent at a time
      const CpuPriorityTree& cpu = SharedTree();
      for (int i = 0; i < k; ++i) out[i] = FindPrefixSumLeaf(cpu.nodes(), cpu.capacity(), masses[i]);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * k);
}

// The tree's own stratified sampler, one counter value per call.
void Sample(benchmark::State& state, PriorityTree* tree, int batch) {
  std::vector<int64_t> indices(batch);
  std::vector<double> values(batch);
  uint64_t counter = 0;
  for (auto _ : state) {
    if (!tree->Sample(7, counter++, indices, values).ok()) state.SkipWithError("sample failed");
    benchmark::DoNotOptimize(values.data());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

void Update(benchmark::State& state, PriorityTree* tree, UpdateStrategy strategy, int64_t k) {
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
  tree->SetStrategy(strategy);
  size_t set = 0;
  for (auto _ : state) {
    const size_t s = set++ % sets;
    if (!tree->Update(index_sets[s], value_sets[s]).ok()) state.SkipWithError("update failed");
  }
  state.SetItemsProcessed(state.iterations() * k);
}

// Registers a row that runs `body` on the CUDA tree, or reports why it cannot.
template <typename Body>
void RegisterCuda(const std::string& name, Body body) {
  benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) {
    std::string why;
    PriorityTree* tree = SharedCudaTree(&why);
    if (tree == nullptr) {
      state.SkipWithError(("no CUDA device: " + why).c_str());
      for (auto _ : state) {
      }
      return;
    }
    body(state, tree);
  })->Unit(benchmark::kMicrosecond)->UseRealTime();
}

void RegisterAll() {
  for (bool batched : {false, true}) {
    benchmark::RegisterBenchmark(batched ? "Descent/batched/512" : "Descent/naive/512",
                                 [batched](benchmark::State& state) { Descent(state, &SharedTree(), 512, batched); })
        ->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  for (UpdateStrategy strategy : {UpdateStrategy::kPerElement, UpdateStrategy::kRebuild, UpdateStrategy::kSparse,
                                  UpdateStrategy::kAuto}) {
    for (int64_t k : {8, 50, 512, 1024, 2048, 32768}) {
      const std::string name = "Update/" + std::string(UpdateStrategyName(strategy)) + "/" + std::to_string(k);
      benchmark::RegisterBenchmark(name.c_str(), [strategy, k](benchmark::State& state) {
        Update(state, &SharedTree(), strategy, k);
      })->Unit(benchmark::kMicrosecond)->UseRealTime();
    }
  }
  for (int batch : {512, 1024}) {
    benchmark::RegisterBenchmark(("Sample/cpu/" + std::to_string(batch)).c_str(), [batch](benchmark::State& state) {
      Sample(state, &SharedTree(), batch);
    })->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  for (int batch : {512, 1024}) {
    RegisterCuda("Sample/cuda/" + std::to_string(batch),
                 [batch](benchmark::State& state, PriorityTree* tree) { Sample(state, tree, batch); });
    RegisterCuda("Descent/cuda/" + std::to_string(batch),
                 [batch](benchmark::State& state, PriorityTree* tree) { Descent(state, tree, batch, true); });
  }
  for (int64_t k : {8, 50, 512, 1024, 2048, 32768}) {
    RegisterCuda("Update/cuda/" + std::to_string(k), [k](benchmark::State& state, PriorityTree* tree) {
      Update(state, tree, UpdateStrategy::kAuto, k);
    });
  }
}

}  // namespace
}  // namespace perserve::tree

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  perserve::tree::RegisterAll();
  perserve::tree::SharedTree();
  std::string why;
  perserve::tree::SharedCudaTree(&why);  // created, filled and calibrated outside any timing
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
