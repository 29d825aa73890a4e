#!/usr/bin/env bash
# The measurements of docs/apex.md: Ape-X with 1, 2 and 4 actors, 4 actors
# under the rate limiter (4-spi16: 16 samples per insert) and the baseline,
# each seed in turn (so a cut-short run still has every configuration for
# the first seeds), one run at a time, capped at S seconds.
# Usage: client/examples/apex/bench.sh OUT_DIR [S=180] [SEEDS="0 1 2"] [CONFIGS="1 2 4 4-spi16 baseline"]
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:?usage: bench.sh OUT_DIR [seconds] [seeds] [configs]} seconds=${2:-180} seeds=${3:-0 1 2}
configs=${4:-1 2 4 4-spi16 baseline}
build=(); [ -n "${APEX_BUILD:-}" ] && build=(--build "$APEX_BUILD")  # another build tree for apex-dqn.sh
mkdir -p "$out"
for seed in $seeds; do
  for actors in $configs; do
    if [ "$actors" = baseline ]; then
      dir="$out/baseline-seed$seed"
      run=("$root/scripts/apex-baseline.sh" --seconds "$seconds" --seed "$seed" --out "$dir")
    elif [ "$actors" = 4-spi16 ]; then
      dir="$out/apex-4-spi16-seed$seed"
      run=("$root/scripts/apex-dqn.sh" --actors 4 --samples-per-insert 16 --seconds "$seconds" --seed "$seed" --out "$dir" "${build[@]}")
    else
      dir="$out/apex-$actors-seed$seed"
      run=("$root/scripts/apex-dqn.sh" --actors "$actors" --seconds "$seconds" --seed "$seed" --out "$dir" "${build[@]}")
    fi
    mkdir -p "$dir"
    echo "$(date -u +%T) $dir: load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/bench.log"
    "${run[@]}" > "$dir/log.txt" 2>&1
    echo "$(date -u +%T) $dir: exit $? $(grep -E '^(learner|baseline):' "$dir/log.txt")" | tee -a "$out/bench.log"
  done
done
