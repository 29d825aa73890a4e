#!/usr/bin/env bash
# The Ape-X load on one replay rank: perserve_bench_apex's paced actors and
# learners beside a perserve-server of Atari n-step items (--n-step 3
# --stack obs:4, 84x84 frames), swept over actor counts, repeated with the
# counts interleaved; then the summary table and the chart (bench/plot_apex.py).
# Usage: scripts/bench-apex.sh [out-dir] [actor counts...]
#        (default bench-results/apex, actors 1 2 4)
# Environment: LEARNERS=1 REPEATS=3 SECONDS_PER_PHASE=4
#              INTAKE=12500 (steps/s all actors append together, split evenly)
#              CAPACITY=262144 (the ring's steps, 1.85 GB; the actors fill it first)
#              START_RATE=4 RATE_FACTOR=1.5 (each learner's batches/s, first phase and step)
# Writes <out-dir>/run-<actors>a-<learners>l-<repeat>.json (one per run),
# apex.csv, apex-summary.json and apex.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-bench-results/apex}
shift || true
actors_list=${*:-1 2 4}
learners=${LEARNERS:-1}
repeats=${REPEATS:-3}
seconds=${SECONDS_PER_PHASE:-4}
intake=${INTAKE:-12500}
capacity=${CAPACITY:-262144}
start_rate=${START_RATE:-4}
rate_factor=${RATE_FACTOR:-1.5}

[ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target perserve-server perserve_bench_apex -j "$(nproc)" >/dev/null
source scripts/mpi-env.sh
mkdir -p "$out_dir"
for repeat in $(seq 1 "$repeats"); do
  for actors in $actors_list; do
    out="$out_dir/run-${actors}a-${learners}l-$repeat.json"
    echo "== $actors actors, $learners learners (repeat $repeat), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    mpirun -np 1 build/server/perserve-server --column obs:uint8:84,84 --column action:int32 \
        --column reward:float32 --column done:uint8 --n-step 3 --discount 0.99 --stack obs:4 \
        --capacity "$capacity" --stats-interval 0 --log-level warn : \
      -np $((actors + learners)) build/bench/perserve_bench_apex --learners "$learners" \
        --intake-steps-per-s "$intake" --fill-steps "$capacity" --seconds "$seconds" \
        --start-rate "$start_rate" --rate-factor "$rate_factor" --out "$out" | sed 's/^/   /'
  done
done
/usr/bin/python3 bench/plot_apex.py "$out_dir"
