#!/usr/bin/env bash
# The GPU check, for a fresh machine with an NVIDIA GPU (H100/H200: arch 90):
# installs what the build needs, builds with CUDA, runs the GPU tests (every
# test, so the CUDA ones run instead of skipping) and the GPU benchmark rows,
# and leaves logs and JSON under $OUT (or ./gpu-results). Meant to finish well
# within 6 minutes on a 16-core H200 machine.
# Usage: scripts/gpu-check.sh   (CUDA_ARCHITECTURES=90 by default)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
status=0
run() {  # run NAME COMMAND...: logs to $out/NAME.log, remembers a failure
  local name=$1
  shift
  echo "== $name"
  if ! "$@" >"$out/$name.log" 2>&1; then
    echo "   FAILED (see $out/$name.log)"
    status=1
  fi
  tail -n 5 "$out/$name.log" | sed 's/^/   /'
}

export PATH="$PATH:/usr/local/cuda/bin"
run deps scripts/install-deps.sh
run nvidia-smi nvidia-smi
run configure cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}" -DPERSERVE_ENABLE_CUDA=ON
run build cmake --build build-gpu -j "$(nproc)"
source scripts/mpi-env.sh
run tests ctest --test-dir build-gpu --output-on-failure -j 4
# The CUDA tests by name, so a skip (no usable device) is visible in the log.
run cuda-tests build-gpu/tests/perserve_tree_tests --gtest_filter='*Cuda*'
if grep -q "SKIPPED" "$out/cuda-tests.log"; then
  echo "   CUDA tests were SKIPPED: no usable device"
  status=1
fi
run bench-scan build-gpu/bench/perserve_bench_scan --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="$out/scan.json" --benchmark_out_format=json
run bench-tree build-gpu/bench/perserve_bench_tree --benchmark_min_time=0.1 \
  --benchmark_out="$out/tree.json" --benchmark_out_format=json
echo "results in $out (exit $status)"
exit $status
