#!/usr/bin/env bash
# Sets up, builds and runs the demo: one replay rank (perserve-server), two
# actors sending synthetic CartPole-like transitions in batches of 50 with
# priorities, and one learner sampling 512 at a time (one sample always in
# flight) and sending back new priorities; all on this machine under mpirun.
# The server prints a stats line every 2 s and a summary at the end.
# Usage: scripts/demo.sh [seconds]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
source scripts/mpi-env.sh
exec mpirun \
  -np 1 build/server/perserve-server --stats-interval 2 : \
  -np 2 build/client/perserve-demo-client --role actor --seconds "$seconds" : \
  -np 1 build/client/perserve-demo-client --role learner --seconds "$seconds"
