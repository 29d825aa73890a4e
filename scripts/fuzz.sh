#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, build-fuzz/: Clang, ASan + UBSan) and
# runs each for a bounded time on its corpus, seeded with real frames.
# Usage: scripts/fuzz.sh [seconds-per-target]   (default 60)
# Exits nonzero if a target crashes, leaks, times out or runs out of memory;
# the input that did it is left in build-fuzz/findings/ (docs/fuzzing.md says
# how to replay it). Full logs: build-fuzz/fuzz-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [seconds-per-target]" >&2
  exit 2
fi
build_dir=build-fuzz
targets=(fuzz_frame fuzz_service fuzz_step_service fuzz_join fuzz_checkpoint)

scripts/install-deps.sh
cxx=$(command -v clang++ || command -v clang++-14 || true)
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cxx" ] || [ -z "$cc" ]; then
  echo "fuzz: no clang/clang++ found (scripts/install-deps.sh installs Debian's clang)" >&2
  exit 1
fi
# Only the fuzz targets and what they link are built, not the tests or tools.
cmake -S . -B "$build_dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPERSERVE_FUZZ=ON -DPERSERVE_ENABLE_CUDA=OFF -DPERSERVE_BUILD_TESTS=OFF -DPERSERVE_BUILD_BENCHMARKS=OFF \
  -DPERSERVE_BUILD_PYTHON=OFF >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}" fuzz_write_seeds

"$build_dir/fuzz/fuzz_write_seeds" "$build_dir/corpus"
mkdir -p "$build_dir/findings" "$build_dir/fuzz-logs"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One OpenMP thread: the fuzzed batches are tiny, and a run replays the same
# way every time.
export OMP_NUM_THREADS=1
failed=()
for target in "${targets[@]}"; do
  log="$build_dir/fuzz-logs/$target.log"
  echo "fuzz: $target for ${seconds}s"
  # The corpus keeps what each run found, so later runs start further in.
  if "$build_dir/fuzz/$target" "$build_dir/corpus/$target" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -timeout=10 -max_len=65536 -print_final_stats=1 -artifact_prefix="$build_dir/findings/$target-" \
      >"$log" 2>&1; then
    grep -E '^(Done|stat::(average_exec_per_sec|new_units_added|peak_rss_mb))' "$log" | sed "s/^/  /"
  else
    echo "fuzz: $target FAILED; the last lines of $log:" >&2
    tail -n 60 "$log" >&2
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs in $build_dir/findings/)" >&2
  exit 1
fi
echo "fuzz: no findings in ${targets[*]}"
