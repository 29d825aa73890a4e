#!/usr/bin/env bash
# Ape-X DQN on CartPole-v1 (client/examples/apex/, docs/apex.md): one
# perserve-server, N Python actors and one Python learner under mpirun on this
# machine. Stops when the greedy policy's mean return over 20 episodes reaches
# 475, or after S seconds; writes DIR/results.json and DIR/curve.png.
#
# Usage: scripts/apex-dqn.sh [--actors N] [--seconds S] [--seed K] [--out DIR]
#                            [--samples-per-insert R] [--build BUILD_DIR] [--expect-return R]
#                            [-- apex.py options]
#   --samples-per-insert R: the server's rate limiter (off by default): R sampled
#     items per inserted one, within an error buffer of 50 R + 512 items
#   --expect-return R: fail unless the best greedy return reached R (the smoke test)
#   exit status 77: no python3-torch (ctest counts it as skipped)
# Uses an existing build (scripts/build.sh build); Python is /usr/bin/python3
# with Debian's python3-torch, python3-mpi4py, python3-numpy, python3-matplotlib.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
actors=2 seconds=300 seed=0 out=apex-run build="$root/build" expect="" spi=0
while [ $# -gt 0 ]; do
  case "$1" in
    --actors) actors=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --samples-per-insert) spi=$2; shift 2 ;;
    --expect-return) expect=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "apex-dqn.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
[ "$actors" -ge 1 ] || { echo "apex-dqn.sh: --actors must be >= 1" >&2; exit 2; }
server="$build/server/perserve-server"
[ -x "$server" ] || { echo "apex-dqn.sh: no $server (build first: scripts/build.sh build)" >&2; exit 2; }
python=/usr/bin/python3
"$python" -c "import torch" 2>/dev/null || {
  echo "apex-dqn.sh: the learner needs PyTorch (apt-get install python3-torch): skipped" >&2; exit 77; }
apex="$root/client/examples/apex"
source "$root/scripts/mpi-env.sh"
export PYTHONPATH="$build/python:$apex" PYTHONDONTWRITEBYTECODE=1
mkdir -p "$out"
limiter=()
if [ "$spi" != 0 ]; then
  limiter=(--samples-per-insert "$spi" --error-buffer "$(awk "BEGIN { print 50 * $spi + 512 }")")
fi
# Step streams (docs/steps.md): actors append each step once (obs, action,
# reward, done: 1 terminated, 2 the bootstrap step of an episode cut off at
# 500 steps) and the server returns 3-step transitions (obs, action, return,
# discount, next_obs). --priority-eps: a |TD| of 0 stays sampleable.
mpirun \
  -np 1 "$server" --capacity 100000 --alpha 0.6 --min-size-to-sample 2000 --priority-eps 1e-3 \
        --column obs:float32:4 --column action:int64 --column reward:float32 --column done:uint8 \
        --n-step 3 --discount 0.99 --stats-interval 0 --seed "$seed" "${limiter[@]}" : \
  -np "$actors" "$python" -m mpi4py "$apex/apex.py" --seconds "$seconds" --seed "$seed" --out "$out" --samples-per-insert "$spi" "$@" : \
  -np 1 "$python" -m mpi4py "$apex/apex.py" --seconds "$seconds" --seed "$seed" --out "$out" --samples-per-insert "$spi" "$@"
if [ -n "$expect" ]; then
  "$python" - "$out/results.json" "$expect" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
best, want = results["best_greedy_return"], float(sys.argv[2])
print(f"apex-dqn.sh: best greedy return {best} (expected >= {want}), {results['env_steps']} env steps, "
      f"{results['learner_steps']} learner steps")
sys.exit(0 if best >= want else 1)
PY
fi
