#!/usr/bin/env bash
# The system benchmark swept over actor counts, transition sizes and
# transports, repeated, on this machine with mpirun; then the summary table
# and the charts.
# Usage: scripts/bench-scaling.sh [out-dir]   (default bench-results/scaling)
# Environment: ACTORS="1 2 4 8" SIZES="small atari" TRANSPORTS="mpi zmq"
#              (SIZES may name atari-steps and atari-sequences, step streams:
#              run over MPI only)
#              SERVERS="1" (server ranks, shards of one replay: e.g. "1 2 4";
#              more than one runs over MPI only)
#              DATA_PATHS="store" (MPI: "store", the default, sends sample
#              replies' rows of 8 KB or more from the store and adds' columns
#              of 64 KiB or more apart, received into the store; "copy" copies
#              both in the server, as before: "copy store" compares them)
#              REPEATS=3 SECONDS_PER_RUN=3 RAW_SECONDS=2 (half before, half after)
# Writes <out-dir>/run-<transport>-<size>-<actors>a[-<servers>s]-<repeat>.json
# (one per run), scaling.csv (medians with ranges) and PNG charts.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-bench-results/scaling}
actors_list=${ACTORS:-1 2 4 8}
sizes=${SIZES:-small atari}
transports=${TRANSPORTS:-mpi zmq}
servers_list=${SERVERS:-1}
data_paths=${DATA_PATHS:-store}
repeats=${REPEATS:-3}
seconds=${SECONDS_PER_RUN:-3}
raw_seconds=${RAW_SECONDS:-2}

scripts/build.sh build -DCMAKE_BUILD_TYPE=Release >/dev/null
source scripts/mpi-env.sh
mkdir -p "$out_dir"
for repeat in $(seq 1 "$repeats"); do
  for size in $sizes; do
    for actors in $actors_list; do
      for transport in $transports; do
        for servers in $servers_list; do
          for path in $data_paths; do
            [ "$servers" = 1 ] || [ "$transport" = mpi ] || continue
            [ "$path" = store ] || [ "$transport" = mpi ] || continue
            # Step streams (atari-steps, atari-sequences) run over MPI only.
            case "$size" in *-steps | *-sequences) [ "$transport" = mpi ] || continue ;; esac
            suffix=$([ "$servers" = 1 ] || echo "-${servers}s")$([ "$path" = store ] || echo "-$path")
            zero_copy=$([ "$path" = store ] && echo "8192 65536" || echo "-1 -1")
            out="$out_dir/run-$transport-$size-${actors}a$suffix-$repeat.json"
            echo "== $transport $size $actors actors, $servers servers, data path $path (repeat $repeat)"
            mpirun -np $((actors + servers + 1)) build/bench/perserve_bench_system --transport "$transport" \
              --size "$size" --servers "$servers" --seconds "$seconds" --raw-seconds "$raw_seconds" \
              --zero-copy-min-row-bytes "${zero_copy% *}" --columns-apart-min-bytes "${zero_copy#* }" \
              --out "$out" | sed 's/^/   /'
          done
        done
      done
    done
  done
done
/usr/bin/python3 bench/plot_scaling.py "$out_dir"
