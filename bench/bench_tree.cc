// perserve_bench_tree: the priority tree's hot operations on a 2^21-leaf tree
// with random leaves, as Google Benchmark rows (JSON with --benchmark_out).
//
//   Descent/naive/512      512 descents one at a time (tree_algorithm.h's
//                          FindPrefixSumLeaf in a loop, no per-call overhead)
//   Descent/batched/512    the same 512 stratified masses through FindPrefixSum
//   Descent/cold/<form>/<B> B stratified masses drawn afresh each call, the
//                          structure evicted from every cache first, the call
//                          alone timed: <form> batched (FindPrefixSum),
//                          classic (ClassicTrees: TorchRL's ScanLowerBound) or
//                          limit (only the lines those descents read, fetched
//                          with nothing waiting on anything: the
//                          memory-level-parallelism limit; counter "lines")
//   Descent/warm/<form>/<B> the same forms in a serving loop: no eviction,
//                          each timed call preceded by one untimed call of
//                          the same form on other fresh masses, so the top
//                          levels are cached as between a server's requests
//   Update/<strategy>/<k>  k random leaves set to random values
//   Update/classic/<k>     the same k leaves in the classic pair of segment
//                          trees (classic_trees.h: the reference point)
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
// bench/summarize_tree.py turns the JSON into ratios (batched vs naive, cold
// batched vs classic and vs the limit, auto vs the fastest strategy at each k)
// and the crossover points.
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "classic_trees.h"
#include "cold_cache.h"
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

ClassicTrees& SharedClassicTrees() {
  static ClassicTrees* trees = [] {
    auto* t = new ClassicTrees(kCapacity);
    std::mt19937_64 rng(1);  // FillRandom's leaves
    std::uniform_real_distribution<double> value(0.01, 10.0);
    std::vector<double> leaves(kCapacity);
    for (double& leaf : leaves) leaf = value(rng);
    t->Fill(leaves);
    return t;
  }();
  return *trees;
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

// The Descent/cold and Descent/warm rows: how a descent meets the tree in a
// server, every call's masses new. Cold: the server's other work between
// samples has pushed the whole structure out of the caches; each call evicts
// it from every cache level first. Warm: a serving loop whose last request
// left the top levels cached; each call is preceded by one untimed call of the
// same form on other random masses (no eviction). Both draw the masses and
// prepare the caches untimed, then time the call alone.
enum class ColdDescent { kBatched, kClassic, kLimit };
enum class Caches { kCold, kWarm };
constexpr int kColdIterations = 200;  // fixed: each untimed eviction takes ~0.75 ms

void DescentPrepared(benchmark::State& state, Caches caches, ColdDescent form, int k) {
  if (caches == Caches::kCold && !PERSERVE_BENCH_CAN_EVICT) {
    state.SkipWithError("cold rows need clflush (x86)");
    for (auto _ : state) {
    }
    return;
  }
  const CpuPriorityTree& tree = SharedTree();
  const ClassicTrees& classic = SharedClassicTrees();
  const size_t tree_bytes = 2 * tree.capacity() * sizeof(TreeNode);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> masses(k), warm_masses(k);
  std::vector<int64_t> leaves(k);
  double lines = 0.0;
  const auto draw = [&](std::vector<double>* out) {
    for (int i = 0; i < k; ++i) (*out)[i] = StratifiedMass(i, 1.0 - unit(rng), tree.Total(), k);
  };
  const auto run = [&](const std::vector<double>& batch, std::span<const TreeNode* const> limit_lines) {
    switch (form) {
      case ColdDescent::kBatched:
        if (!tree.FindPrefixSum(batch, leaves).ok()) state.SkipWithError("descent failed");
        break;
      case ColdDescent::kClassic:
        classic.FindPrefixSum(batch, leaves);
        break;
      case ColdDescent::kLimit:
        benchmark::DoNotOptimize(FetchLines(limit_lines));
        break;
    }
  };
  for (auto _ : state) {
    draw(&masses);
    std::vector<const TreeNode*> limit_lines;
    if (form == ColdDescent::kLimit) limit_lines = LinesDescentsRead(tree.nodes(), tree.capacity(), masses);
    lines += static_cast<double>(limit_lines.size());
    if (caches == Caches::kWarm) {
      draw(&warm_masses);
      run(warm_masses, form == ColdDescent::kLimit ? LinesDescentsRead(tree.nodes(), tree.capacity(), warm_masses)
                                                   : std::vector<const TreeNode*>{});
    } else if (form == ColdDescent::kClassic) {
      EvictFromCaches(classic.sums().data(), classic.sums().size_bytes());
    } else {
      EvictFromCaches(tree.nodes(), tree_bytes);
    }
    const auto start = std::chrono::steady_clock::now();
    run(masses, limit_lines);
    const auto stop = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(leaves.data());
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
  }
  if (form == ColdDescent::kLimit) state.counters["lines"] = lines / static_cast<double>(state.iterations());
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

// k random leaves set to random values, rotating through UpdateSets(k) batches.
struct UpdateBatches {
  explicit UpdateBatches(int64_t k) : sets(UpdateSets(k)), indices(sets), values(sets) {
    std::mt19937_64 rng(3 + k);
    std::uniform_int_distribution<int64_t> leaf(0, kCapacity - 1);
    std::uniform_real_distribution<double> value(0.01, 10.0);
    for (int64_t s = 0; s < sets; ++s) {
      for (int64_t j = 0; j < k; ++j) {
        indices[s].push_back(leaf(rng));
        values[s].push_back(value(rng));
      }
    }
  }
  int64_t sets;
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<double>> values;
};

void Update(benchmark::State& state, PriorityTree* tree, UpdateStrategy strategy, int64_t k) {
  const UpdateBatches batches(k);
  tree->SetStrategy(strategy);
  size_t set = 0;
  for (auto _ : state) {
    const size_t s = set++ % batches.sets;
    if (!tree->Update(batches.indices[s], batches.values[s]).ok()) state.SkipWithError("update failed");
  }
  state.SetItemsProcessed(state.iterations() * k);
}

void UpdateClassic(benchmark::State& state, int64_t k) {
  const UpdateBatches batches(k);
  ClassicTrees& trees = SharedClassicTrees();
  size_t set = 0;
  for (auto _ : state) {
    const size_t s = set++ % batches.sets;
    if (!trees.Update(batches.indices[s], batches.values[s])) state.SkipWithError("update failed");
  }
  benchmark::DoNotOptimize(trees.Total());
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
  for (int k : {512, 1024}) {
    for (auto [form, name] : {std::pair{ColdDescent::kBatched, "batched"}, std::pair{ColdDescent::kClassic, "classic"},
                              std::pair{ColdDescent::kLimit, "limit"}}) {
      benchmark::RegisterBenchmark(("Descent/cold/" + std::string(name) + "/" + std::to_string(k)).c_str(),
                                   [form, k](benchmark::State& state) { DescentPrepared(state, Caches::kCold, form, k); })
          ->Unit(benchmark::kMicrosecond)->UseManualTime()->Iterations(kColdIterations);
      benchmark::RegisterBenchmark(("Descent/warm/" + std::string(name) + "/" + std::to_string(k)).c_str(),
                                   [form, k](benchmark::State& state) { DescentPrepared(state, Caches::kWarm, form, k); })
          ->Unit(benchmark::kMicrosecond)->UseManualTime();
    }
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
  for (int64_t k : {8, 50, 512, 1024, 2048, 32768}) {
    benchmark::RegisterBenchmark(("Update/classic/" + std::to_string(k)).c_str(),
                                 [k](benchmark::State& state) { UpdateClassic(state, k); })
        ->Unit(benchmark::kMicrosecond)->UseRealTime();
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
  perserve::tree::SharedClassicTrees();
  std::string why;
  perserve::tree::SharedCudaTree(&why);  // created, filled and calibrated outside any timing
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
