#!/usr/bin/env bash
# Runs perserve_bench_tree (2^21-leaf tree) and summarises it as ratios.
# Usage: scripts/bench-tree.sh [output-dir] [extra Google Benchmark flags...]
# Writes <output-dir>/tree.json (raw, every repetition) and tree-summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-bench-results}
shift || true
scripts/build.sh build >/dev/null
mkdir -p "$out_dir"
# Repetitions interleaved at random spread the machine's noise over every row
# alike; the summary takes each row's median.
build/bench/perserve_bench_tree \
  --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true --benchmark_min_time=0.1 --benchmark_min_warmup_time=0.05 \
  --benchmark_out="$out_dir/tree.json" --benchmark_out_format=json "$@"
/usr/bin/python3 bench/summarize_tree.py "$out_dir/tree.json"
