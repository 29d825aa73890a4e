#!/usr/bin/env bash
# Installs everything perserve's build, tests and benchmarks need, from Debian's
# packages only. Idempotent: packages already present are skipped, and apt is not
# touched at all when nothing is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  openmpi-bin libopenmpi-dev
  libcereal-dev libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libzmq3-dev cppzmq-dev
  python3 python3-numpy python3-matplotlib python3-torch
  python3-dev python3-pybind11 pybind11-dev python3-mpi4py python3-pytest
  python3-venv python3-pip python3-setuptools python3-wheel
  clang libclang-rt-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Dockerfile linter the tests run (there is no Docker engine to build the
# images here), from the npm registry into .tools/, where npm is available.
cd "$(dirname "$0")/.."
linter=.tools/node_modules/.bin/dockerfilelint
if [ ! -x "$linter" ] && command -v npm >/dev/null 2>&1; then
  npm install --prefix .tools --no-audit --no-fund --silent dockerfilelint@1.8.0 >/dev/null 2>&1 \
    || echo "install-deps: could not install dockerfilelint; the Dockerfile lint test will be skipped"
fi
