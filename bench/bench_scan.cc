// perserve_bench_scan: the episodic prefix sum in elements/s for rollout
// shapes [streams, time] = [64, 50], [1024, 1000], [1, 2^21]: the CPU loop
// (the oracle), the CPU's parallel path and CUDA (host arrays in and out),
// in the same run. Rows: Scan/<cpu_loop|cpu_parallel|cuda>/<streams>x<time>.
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "scan/episodic_prefix_sum.h"
#include "tree/cuda/cuda_device.h"

namespace perserve::scan {
namespace {

enum class Path { kLoop, kParallel, kCuda };

void Scan(benchmark::State& state, Path path, int64_t streams, int64_t length) {
  std::string why;
  if (path == Path::kCuda && tree::UsableCudaDeviceCount(&why) == 0) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int64_t elements = streams * length;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::bernoulli_distribution done(0.01);
  std::vector<double> x(elements), out(elements), carry_sum(streams, 0.0);
  std::vector<uint8_t> dones(elements), carry_done(streams, 0);
  for (int64_t i = 0; i < elements; ++i) {
    x[i] = value(rng);
    dones[i] = done(rng);
  }
  const ScanArrays<double> arrays{x, dones, streams, length, carry_sum, carry_done, out};
  for (auto _ : state) {
    switch (path) {
      case Path::kLoop:
        EpisodicPrefixSumLoop(arrays, Boundary::kEndsAt);
        break;
      case Path::kParallel:
        EpisodicPrefixSumParallel(arrays, Boundary::kEndsAt);
        break;
      case Path::kCuda:
        if (!EpisodicPrefixSumCuda(arrays, Boundary::kEndsAt).ok()) state.SkipWithError("CUDA scan failed");
        break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * elements);
}

void RegisterAll() {
  const struct {
    const char* name;
    Path path;
  } paths[] = {{"cpu_loop", Path::kLoop}, {"cpu_parallel", Path::kParallel}, {"cuda", Path::kCuda}};
  for (auto [streams, length] : {std::pair<int64_t, int64_t>{64, 50}, {1024, 1000}, {1, int64_t{1} << 21}}) {
    for (const auto& path : paths) {
      const std::string name = "Scan/" + std::string(path.name) + "/" + std::to_string(streams) + "x" +
                               std::to_string(length);
      benchmark::RegisterBenchmark(name.c_str(), Scan, path.path, streams, length)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace perserve::scan

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  perserve::scan::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
