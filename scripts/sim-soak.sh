#!/usr/bin/env bash
# A long soak of the deterministic simulation (docs/testing.md): runs seeds in
# chunks, from a first seed on, until a duration has passed, on every core,
# and prints each failing seed with the command that replays it.
# Usage: scripts/sim-soak.sh [duration, e.g. 3600s, 90m, 8h (default 1h)] [first seed (default 100000)] [build dir]
# A round runs PERSERVE_SIM_SOAK_CHUNK seeds (default 2000) per core; the
# duration is checked between rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-1h}
first=${2:-100000}
build_dir=${3:-build}
binary="$build_dir/tests/perserve_sim_tests"
[ -x "$binary" ] || { echo "no $binary: build the target perserve_sim_tests first" >&2; exit 2; }
case "$duration" in
  *h) seconds=$(( ${duration%h} * 3600 )) ;;
  *m) seconds=$(( ${duration%m} * 60 )) ;;
  *s) seconds=${duration%s} ;;
  *) seconds=$duration ;;
esac
chunk=${PERSERVE_SIM_SOAK_CHUNK:-2000}  # seeds a process runs (about 15-30 s each)
jobs=$(nproc)
end=$(( $(date +%s) + seconds ))
log=$(mktemp -d /tmp/perserve-sim-soak-XXXXXX)
echo "soak: seeds from $first for ${seconds}s on $jobs cores; chunk logs in $log"
next=$first
failed=0
while [ "$(date +%s)" -lt "$end" ]; do
  pids=()
  for ((j = 0; j < jobs; ++j)); do
    PERSERVE_SIM_FIRST_SEED=$next PERSERVE_SIM_SEEDS=$chunk \
      "$binary" --gtest_filter=SimulationTest.ManySeeds >"$log/$next.log" 2>&1 &
    pids+=("$!:$next")
    next=$(( next + chunk ))
  done
  for entry in "${pids[@]}"; do
    if ! wait "${entry%%:*}"; then
      failed=1
      grep -E "^seed [0-9]+ failed|rerun:" "$log/${entry#*:}.log" || tail -20 "$log/${entry#*:}.log"
    else
      rm -f "$log/${entry#*:}.log"
    fi
  done
done
echo "soak: seeds $first .. $(( next - 1 )) run; $([ $failed = 0 ] && echo 'all passed' || echo "FAILURES above (logs in $log)")"
[ $failed = 0 ] && rmdir "$log"
exit $failed
