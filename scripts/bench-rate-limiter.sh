#!/usr/bin/env bash
# The rate limiter under skewed loads: a fast actor against a slow learner and
# the reverse, with --samples-per-insert R --error-buffer E, under mpirun on
# this machine. Usage: scripts/bench-rate-limiter.sh [output-dir] [batches]
# Writes <output-dir>/rate-limiter.json: per skew the items inserted and
# sampled, the measured samples per insert, and the extremes of the offset
# I R - S - R M the server saw (within [-E, E] up to one add's R n where the
# replay first reaches M).
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-bench-results}
batches=${2:-3000}
scripts/build.sh build >/dev/null
source scripts/mpi-env.sh
mkdir -p "$out_dir"
R=4 E=500 M=1000
/usr/bin/python3 - "$out_dir/rate-limiter.json" "$batches" "$R" "$E" "$M" <<'PY'
import json, re, subprocess, sys
out, batches, R, E, M = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
client = "build/tests/perserve_mpi_waits_client"
rows = []
for actor, learner in (("fast_actor", "slow_learner"), ("slow_actor", "fast_learner")):
    run = subprocess.run(["mpirun", "-np", "1", "build/server/perserve-server", "--samples-per-insert", str(R),
                          "--error-buffer", str(E), "--min-size-to-sample", str(M), "--stats-interval", "0", ":",
                          "-np", "1", client, "skew", actor, batches, ":", "-np", "1", client, "skew", learner],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=True)
    final = [line for line in run.stdout.splitlines() if "final:" in line][-1]
    inserted = int(re.search(r"(\d+) items in", final).group(1))
    sampled = int(re.search(r"(\d+) sampled", final).group(1))
    low, high = (float(x) for x in re.search(r"seen \[(-?\d+), (-?\d+)\]", final).groups())
    held = int(re.search(r"(\d+) adds held", final).group(1))
    rows.append({"skew": f"{actor} / {learner}", "inserted": inserted, "sampled": sampled,
                 "samples_per_insert": sampled / inserted, "target": R, "error_buffer": E,
                 "offset_low": low, "offset_high": high, "adds_held": held,
                 "within_buffer": low >= -E and high <= E + 20 * R})
    print(f"{actor:>10} / {learner:<12}: {sampled} sampled / {inserted} inserted = {sampled / inserted:.4f} "
          f"(target {R}), offsets [{low:.0f}, {high:.0f}] within +-{E:.0f}: {rows[-1]['within_buffer']}, "
          f"{held} adds held")
json.dump({"benchmark": "rate_limiter", "rows": rows}, open(out, "w"), indent=2)
sys.exit(0 if all(r["within_buffer"] for r in rows) else 1)
PY
