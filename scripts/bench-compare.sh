#!/usr/bin/env bash
# Compares two builds of perserve_bench_system in one sweep, run by run in
# turn (these machines drift: a ratio within one sweep is what holds), and
# writes every run's JSON and a summary (medians, the after/before ratios).
# Usage: scripts/bench-compare.sh BEFORE_BINARY AFTER_BINARY OUT_DIR
#   env: ACTORS="1 2" SIZES="small atari" REPEATS=3 SECONDS_PER_RUN=3
#        AFTER_ARGS="..." (flags for the after binary alone, as --stack-axis first)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: scripts/bench-compare.sh BEFORE_BINARY AFTER_BINARY OUT_DIR" >&2; exit 2; }
before=$1 after=$2 out=$3
for binary in "$before" "$after"; do [ -x "$binary" ] || { echo "not an executable: $binary" >&2; exit 2; }; done
source scripts/mpi-env.sh
mkdir -p "$out"
for repeat in $(seq 1 "${REPEATS:-3}"); do
  for size in ${SIZES:-small atari}; do
    for actors in ${ACTORS:-1 2}; do
      for side in before after; do
        binary=$before extra=""
        [ "$side" = after ] && binary=$after extra=${AFTER_ARGS:-}
        json="$out/$side-$size-$actors-$repeat.json"
        echo "== $side $size, $actors actors, repeat $repeat"
        mpirun -np $((actors + 2)) "$binary" --transport mpi --size "$size" --seconds "${SECONDS_PER_RUN:-3}" \
          --raw-seconds 2 $extra --out "$json" > "$out/$side-$size-$actors-$repeat.log" 2>&1 \
          || { echo "failed: see $out/$side-$size-$actors-$repeat.log" >&2; exit 1; }
      done
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
runs = {}
for path in glob.glob(os.path.join(out, "*-*-*-*.json")):
    side, rest = os.path.basename(path)[:-5].split("-", 1)
    size, actors, _ = rest.rsplit("-", 2)  # sizes may hold dashes (atari-steps)
    with open(path) as f:
        runs.setdefault((size, int(actors)), {}).setdefault(side, []).append(json.load(f))
keys = ["items_per_s", "samples_per_s", "server_cpu_s_per_gb", "intake_over_raw_mpi", "sample_over_raw_mpi"]
print_keys = ["items_per_s", "samples_per_s", "intake_over_raw_mpi", "server_cpu_s_per_gb"]
summary = []
for (size, actors), sides in sorted(runs.items()):
    row = {"size": size, "actors": actors}
    for key in keys:
        b = statistics.median(r[key] for r in sides["before"])
        a = statistics.median(r[key] for r in sides["after"])
        row[key] = {"before": b, "after": a, "after_over_before": a / b if b else None,
                    "before_runs": sorted(r[key] for r in sides["before"]),
                    "after_runs": sorted(r[key] for r in sides["after"])}
    summary.append(row)
    print(f"{size:15} {actors} actors: " + ", ".join(
        f"{k} {row[k]['before']:.4g} -> {row[k]['after']:.4g} ({row[k]['after_over_before']:.2f}x)" for k in print_keys))
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
PY
