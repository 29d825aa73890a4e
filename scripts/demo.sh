#!/usr/bin/env bash
# Sets up, builds and runs the demo: a 2^21-leaf priority tree filled in
# intake-sized batches, then the learner's loop (stratified sample of 512,
# priority update) with the figures printed. Flags go to perserve_tree_demo
# (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
build/server/perserve_tree_demo "$@"
