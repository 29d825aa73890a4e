#!/usr/bin/env bash
# A sample as torch tensors against as NumPy arrays (bench/python/torch_sample.py),
# for CartPole-sized and Atari-sized transitions, each a job under perserve-launch.
# Usage: bench/python/torch_sample.sh [build-dir] [out-dir]   (needs python3-torch)
# Writes out-dir/{cartpole,atari}.json (default bench-results/torch-sample/).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=${2:-$root/bench-results/torch-sample}
mkdir -p "$out"
declare -A columns=(
  [cartpole]="--column obs:float32:4 --column action:int64 --column reward:float32 --column next_obs:float32:4 --column done:uint8"
  [atari]="--column obs:uint8:84,84,4 --column action:int64 --column reward:float32 --column next_obs:uint8:84,84,4 --column done:uint8"
)
for schema in cartpole atari; do
  # shellcheck disable=SC2086
  PYTHONPATH="$build/python" /usr/bin/python3 -m perserve.launch \
    -n 1 "$build/server/perserve-server" --capacity 32768 --min-size-to-sample 1000 --stats-interval 0 \
         ${columns[$schema]} : \
    -n 2 "$root/bench/python/torch_sample.py" "$schema" "$out/$schema.json"
done
echo "torch_sample: wrote $out/cartpole.json and $out/atari.json"
