#!/usr/bin/env bash
# `pip install .` as a user runs it, into a fresh virtual environment:
#   1. python3 -m venv --system-site-packages (Debian's numpy, mpi4py, torch seen through it)
#   2. pip install --no-build-isolation --no-index <checkout> (offline: Debian's setuptools
#      and wheel), reusing this build's compiled targets (PERSERVE_BUILD_DIR; setup.py
#      configures and builds a fresh build-pip/ otherwise)
#   3. perserve-server and perserve-launch are on the environment's PATH, `import perserve`
#      loads the extension installed there, which finds the installed client library
#   4. a job under the installed launcher: the installed server and the installed first example
#   5. pip uninstall perserve leaves none of its files
# Usage: pip_install_test.sh <source-dir> <build-dir> <python3>
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv

"$python" -m venv --system-site-packages "$venv"
started=$(date +%s%N)
PERSERVE_BUILD_DIR=$build "$venv/bin/pip" install --quiet --no-build-isolation --no-index --no-cache-dir "$source_dir"
echo "pip_install_test: pip install took $(( ($(date +%s%N) - started) / 1000000 )) ms (the build reused)"

export PATH="$venv/bin:$PATH"   # as `source venv/bin/activate` does
for program in perserve-server perserve-launch; do
  found=$(command -v "$program")
  [ "$found" = "$venv/bin/$program" ] || { echo "pip_install_test: $program is $found, not in $venv/bin" >&2; exit 1; }
done
perserve-server --help >/dev/null
(cd "$work" && python3 -c "
import perserve, perserve._perserve as ext
assert ext.__file__.startswith('$venv/'), ext.__file__
print('pip_install_test: import perserve from', perserve.__file__)")
# A job from the environment alone: its launcher, server, python and example.
(cd "$work" && perserve-launch -n 1 perserve-server --stats-interval 0 : \
                -n 2 "$venv/share/perserve/examples/actor_learner.py")

"$venv/bin/pip" uninstall --quiet --yes perserve
left=$(find "$venv" -path "*perserve*" -type f)
if [ -n "$left" ]; then
  echo "pip_install_test: pip uninstall left:" >&2
  echo "$left" >&2
  exit 1
fi
if (cd "$work" && "$venv/bin/python" -c "import perserve" 2>/dev/null); then
  echo "pip_install_test: perserve still imports after pip uninstall" >&2
  exit 1
fi
echo "pip_install_test: OK"
