#!/usr/bin/env bash
# The tree's update strategies over several process starts: each start
# calibrates "auto" anew (the table a server keeps for its life), so one
# start's noisy calibration shows here as "auto" off the fastest fixed
# strategy. Per start: every strategy, "auto" and the classic pair of segment
# trees at 8 .. 32768 leaves; then bench/summarize_tree_starts.py checks auto
# within 1.1x of the fastest fixed strategy in every start, and the classic
# trees' time over auto's at the small batches (target 1.5x at 8 and 50).
# Usage: scripts/bench-tree-starts.sh [out-dir] [starts]   (default bench-results/tree-starts, 5)
# Environment: REPETITIONS=3 MIN_TIME=0.05 (per row: Google Benchmark's
# repetitions, interleaved at random, and seconds each)
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-bench-results/tree-starts}
starts=${2:-5}
scripts/build.sh build >/dev/null
mkdir -p "$out_dir"
rm -f "$out_dir"/start-*.json
for start in $(seq 1 "$starts"); do
  echo "== start $start of $starts"
  build/bench/perserve_bench_tree \
    --benchmark_filter='^Update/(per_element|rebuild|sparse|auto|classic)/(8|50|512|2048|32768)/' \
    --benchmark_repetitions=${REPETITIONS:-3} --benchmark_enable_random_interleaving=true --benchmark_min_time=${MIN_TIME:-0.05} \
    --benchmark_out="$out_dir/start-$start.json" --benchmark_out_format=json >/dev/null
done
/usr/bin/python3 bench/summarize_tree_starts.py "$out_dir"/start-*.json --out "$out_dir/summary.json"
