// perserve_bench_tree: the priority tree's hot operations on a 2^21-leaf tree
// with random leaves, as Google Benchmark rows (JSON with --benchmark_out).
//
//   Descent/naive/512      512 descents one at a time (tree_algorithm.h's
//                          FindPrefixSumLeaf in a loop, no per-call overhead)
//   Descent/batched/512    the same 512 stratified masses through FindPrefixSum
//   Update/<strategy>/<k>  k random leaves set to random values
//   Update/classic/<k>     the same k leaves in the classic pair of segment
//                          trees (ClassicTrees below: the reference point)
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
#include <limits>
#include <span>
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

// The classic segment tree of PER implementations (OpenAI Baselines, and the
// C++ SumSegmentTree / MinSegmentTree pair TorchRL's prioritized sampler
// keeps): one array of 2 x capacity values per operation; an update sets each
// leaf and walks to the root, in the sum tree, then in the min tree. Written
// here from that algorithm, as the reference point in the same process
// (TorchRL itself cannot be installed on this machine: no PyPI), with the one
// check such a tree makes (the index in range).
class ClassicTrees {
 public:
  explicit ClassicTrees(int64_t capacity)
      : capacity_(capacity), sums_(2 * capacity, 0.0), mins_(2 * capacity, std::numeric_limits<double>::infinity()) {}

  void Fill(std::span<const double> leaves) {
    std::copy(leaves.begin(), leaves.end(), sums_.begin() + capacity_);
    std::copy(leaves.begin(), leaves.end(), mins_.begin() + capacity_);
    for (int64_t node = capacity_ - 1; node >= 1; --node) {
      sums_[node] = sums_[2 * node] + sums_[2 * node + 1];
      mins_[node] = std::min(mins_[2 * node], mins_[2 * node + 1]);
    }
  }
  bool Update(std::span<const int64_t> indices, std::span<const double> values) {
    return Set(&sums_, indices, values, [](double a, double b) { return a + b; }) &&
           Set(&mins_, indices, values, [](double a, double b) { return std::min(a, b); });
  }
  double Total() const { return sums_[1]; }

 private:
  template <typename Op>
  bool Set(std::vector<double>* tree, std::span<const int64_t> indices, std::span<const double> values, Op op) {
    double* t = tree->data();
    for (size_t j = 0; j < indices.size(); ++j) {
      if (indices[j] < 0 || indices[j] >= capacity_) return false;
      int64_t node = indices[j] + capacity_;
      t[node] = values[j];
      for (node >>= 1; node >= 1; node >>= 1) t[node] = op(t[2 * node], t[2 * node + 1]);
    }
    return true;
  }

  int64_t capacity_;
  std::vector<double> sums_, mins_;
};

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
