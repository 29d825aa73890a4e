#!/usr/bin/env bash
# Sets up, builds and runs every test. Usage: scripts/test.sh [--sanitize]
#   --sanitize   a second build (build-sanitize/) with AddressSanitizer and
#                UndefinedBehaviorSanitizer, running the same tests there
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build
options=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--sanitize" ]; then
  build_dir=build-sanitize
  options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPERSERVE_SANITIZE=ON -DPERSERVE_BUILD_BENCHMARKS=OFF)
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/test.sh [--sanitize]" >&2
  exit 2
fi
source scripts/mpi-env.sh
scripts/build.sh "$build_dir" "${options[@]}"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build_dir" --output-on-failure -j 2
