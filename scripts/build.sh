#!/usr/bin/env bash
# Configures (once) and builds perserve. Usage: scripts/build.sh [build-dir] [cmake -D options...]
# Installs missing Debian packages first (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
scripts/install-deps.sh
# nvcc lives outside PATH on a stock CUDA install; CMake also looks there itself.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$build_dir" "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
