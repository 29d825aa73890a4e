#!/usr/bin/env bash
# The GPU check, for a fresh machine with an NVIDIA GPU (H100/H200: arch 90):
# builds with CUDA, runs the tree and scan tests (the CUDA suites run instead
# of skipping; a skip fails the check) and the tree and scan benchmarks, and
# leaves logs and JSON under $OUT (or ./gpu-results). Meant to finish within
# 6 minutes on a 16-core H200 machine: the tree benchmark's cold-cache
# descents (CPU rows, 200 cache flushes each, several minutes there) are left
# out; COLD=1 runs them too.
#
# Dependencies, in this order of preference:
#   - .gpu-debs/ (made here by scripts/gpu-bundle.sh, sent along with the tree):
#     unpacked into a private prefix, for machines that reach no package mirror;
#   - otherwise scripts/install-deps.sh (apt-get), where a mirror is reachable.
# Where MPI, CLI11 and cereal are installed too, everything is built and every
# test runs (the replay rank then uses the CUDA tree through device "auto");
# otherwise the build is PERSERVE_TREE_ONLY: the tree, the scan, their tests.
#
# Usage: scripts/gpu-check.sh   (CUDA_ARCHITECTURES=90 by default; FULL=0 or 1
# forces the tree-only or the full build instead of choosing by what is there)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
# Each step's log is appended to one $out/gpu-check.log as the step ends (the
# device tool brings back at most 8 files, and what a cut-off run had written
# still comes back).
logs=$(mktemp -d)
: >"$out/gpu-check.log"
status=0
run() {  # run NAME COMMAND...: logs to $logs/NAME.log, remembers a failure
  local name=$1
  shift
  echo "== $name"
  if ! "$@" >"$logs/$name.log" 2>&1; then
    echo "   FAILED (see $name in $out/gpu-check.log)"
    status=1
  fi
  tail -n 5 "$logs/$name.log" | sed 's/^/   /'
  { echo "======== $name"; cat "$logs/$name.log"; } >>"$out/gpu-check.log"
}

export PATH="$PATH:/usr/local/cuda/bin"
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}"
            -DPERSERVE_ENABLE_CUDA=ON)
if compgen -G ".gpu-debs/*.deb" >/dev/null; then
  prefix=/tmp/perserve-deps
  unpack() { for deb in .gpu-debs/*.deb; do dpkg -x "$deb" "$prefix" || return 1; done; }
  run deps unpack
  cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr")
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  run deps scripts/install-deps.sh
fi
full=${FULL:-auto}
if [ "$full" = auto ]; then
  full=0
  command -v mpicxx >/dev/null && [ -f /usr/include/CLI/CLI.hpp ] && [ -d /usr/include/cereal ] && full=1
fi
[ "$full" = 1 ] || cmake_args+=(-DPERSERVE_TREE_ONLY=ON)
run machine sh -c 'nvidia-smi; nproc; g++ --version | head -1; nvcc --version | tail -1; cmake --version | head -1'
run configure cmake -S . -B build-gpu "${cmake_args[@]}"
run build cmake --build build-gpu -j "$(nproc)"
if [ "$full" = 1 ]; then
  source scripts/mpi-env.sh
  run tests ctest --test-dir build-gpu --output-on-failure -j 4
else
  run tests build-gpu/tests/perserve_tree_tests
fi
# The CUDA tests by name, so a skip (no usable device) is visible in the log.
run cuda-tests build-gpu/tests/perserve_tree_tests --gtest_filter='*Cuda*'
if grep -q "SKIPPED" "$logs/cuda-tests.log"; then
  echo "   CUDA tests were SKIPPED: no usable device"
  status=1
fi
run bench-scan build-gpu/bench/perserve_bench_scan --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="$out/scan.json" --benchmark_out_format=json
tree_filter=-Descent/cold
[ "${COLD:-0}" = 1 ] && tree_filter=.
run bench-tree build-gpu/bench/perserve_bench_tree --benchmark_filter="$tree_filter" \
  --benchmark_min_time=0.1 --benchmark_repetitions=3 \
  --benchmark_out="$out/tree.json" --benchmark_out_format=json
python3 bench/summarize_tree.py "$out/tree.json" --out "$out/tree-summary.json" >"$out/tree-summary.txt" 2>&1
tail -n 25 "$out/tree-summary.txt"
echo "results in $out: $(ls "$out" | tr '\n' ' ')(exit $status)"
exit $status
