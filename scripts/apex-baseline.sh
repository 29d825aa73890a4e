#!/usr/bin/env bash
# The baseline for scripts/apex-dqn.sh (docs/apex.md): the same learner with an
# in-process prioritized replay and one environment loop, one process, no MPI.
# Writes DIR/results.json and DIR/curve.png.
#
# Usage: scripts/apex-baseline.sh [--seconds S] [--seed K] [--out DIR] [-- baseline.py options]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=300 seed=0 out=baseline-run
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "apex-baseline.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
source "$root/scripts/mpi-env.sh"  # OMP_WAIT_POLICY, as the Ape-X job has it
export PYTHONPATH="$root/client/examples/apex" PYTHONDONTWRITEBYTECODE=1
mkdir -p "$out"
exec /usr/bin/python3 "$root/client/examples/apex/baseline.py" --seconds "$seconds" --seed "$seed" --out "$out" "$@"
