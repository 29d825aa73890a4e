#!/usr/bin/env bash
# Sets up, builds and runs the demo: one replay rank (perserve-server), two
# actors sending synthetic CartPole-like transitions in batches of 50 with
# priorities, and one learner sampling 512 at a time (one sample always in
# flight) and sending back new priorities; all on this machine under
# perserve-launch (mpirun with the settings it needs here). The server
# prints a stats line every 2 s and a summary at the end; Ctrl-C ends it.
# Builds only the two programs it runs (scripts/test.sh builds the rest).
# Usage: scripts/demo.sh [seconds]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release --target perserve-server --target perserve-demo-client
# The launcher is plain Python in the configured build tree (no extension needed).
PYTHONPATH=build/python exec /usr/bin/python3 -m perserve.launch \
  -n 1 build/server/perserve-server --stats-interval 2 : \
  -n 2 build/client/perserve-demo-client --role actor --seconds "$seconds" : \
  -n 1 build/client/perserve-demo-client --role learner --seconds "$seconds"
