#!/usr/bin/env bash
# Configures (once) and builds perserve.
# Usage: scripts/build.sh [build-dir] [cmake -D options...] [--target T ...]
#   --target T   build only T (repeat it; default: every target, the tests,
#                the simulation and the benchmarks included)
# Installs missing Debian packages first (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
options=()
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--target" ]; then
    [ $# -ge 2 ] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
    targets+=(--target "$2")
    shift 2
  else
    options+=("$1")
    shift
  fi
done
scripts/install-deps.sh
# nvcc lives outside PATH on a stock CUDA install; CMake also looks there itself.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$build_dir" "${options[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
