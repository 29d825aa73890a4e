#!/usr/bin/env bash
# Issue 35's portable seeds: a seed's simulated run is the same under
# libstdc++ and libc++. Builds perserve_sim_tests with Clang against libc++
# (build-libcxx/: GoogleTest from /usr/src/googletest, fmt and spdlog
# header-only, no CUDA), runs the first SEEDS seeds there and in the release
# build (build/, as scripts/test.sh leaves it; built here if missing), and
# compares each seed's line: passed, steps, replies, and the digests of its
# replies and of its draws (PERSERVE_SIM_SCHEDULES, simulation_test.cc).
# Usage: scripts/sim-portability.sh [seeds]   (default 2000)
#
# In .ci/run (after the release tests, whose build/ it reuses). Every draw
# of the simulation is PortableRandom's and the client's shard plan uses its
# own shuffle (client/src/portable_shuffle.h), so every seed matches.
# Measured here: 2000 seeds identical (with several tables, timers and
# checkpoints in memory); the libc++ build 6.9 min of CPU (4.2 min wall at
# -j 2), each side's 2000 seeds about 7 s.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-2000}
if ! [[ "$seeds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/sim-portability.sh [seeds]" >&2
  exit 2
fi

packages=(clang libc++-dev libc++abi-dev libomp-dev googletest)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build=build-libcxx
jobs=$(nproc)
libcxx=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-stdlib=libc++
        -DCMAKE_EXE_LINKER_FLAGS=-stdlib=libc++ -DCMAKE_SHARED_LINKER_FLAGS=-stdlib=libc++
        -DCMAKE_BUILD_TYPE=Release)
# Debian ships GoogleTest's sources; its compiled one is libstdc++'s.
if [ ! -f "$build/googletest/lib/cmake/GTest/GTestConfig.cmake" ]; then
  cmake -S /usr/src/googletest -B "$build/googletest-build" "${libcxx[@]}" -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX="$PWD/$build/googletest" >/dev/null
  cmake --build "$build/googletest-build" -j "$jobs" >/dev/null
  cmake --install "$build/googletest-build" >/dev/null
fi
cmake -S . -B "$build" "${libcxx[@]}" -DCMAKE_PREFIX_PATH="$PWD/$build/googletest" \
  -DPERSERVE_HEADER_ONLY_LOGGING=ON -DPERSERVE_ENABLE_CUDA=OFF -DPERSERVE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target perserve_sim_tests
if ! ldd "$build/tests/perserve_sim_tests" | grep -q 'libc++\.so'; then
  echo "sim-portability: $build/tests/perserve_sim_tests is not linked against libc++" >&2
  exit 1
fi
[ -x build/tests/perserve_sim_tests ] || scripts/build.sh build -DCMAKE_BUILD_TYPE=Release --target perserve_sim_tests

# The generator's pinned draws under libc++ too.
"$build/tests/perserve_sim_tests" --gtest_filter='PortableRandomTest.*' --gtest_brief=1
declare -A library=([build]=libstdc++ [$build]=libc++)
for dir in build "$build"; do
  started=$(date +%s)
  PERSERVE_SIM_SEEDS=$seeds PERSERVE_SIM_SCHEDULES="$build/schedules-${library[$dir]}.txt" \
    "$dir/tests/perserve_sim_tests" --gtest_filter=SimulationTest.ManySeeds --gtest_brief=1
  echo "sim-portability: $seeds seeds under ${library[$dir]} in $(( $(date +%s) - started )) s"
done
if ! diff "$build/schedules-libstdc++.txt" "$build/schedules-libc++.txt" >"$build/schedules.diff"; then
  echo "sim-portability: seeds whose runs differ between libstdc++ (<) and libc++ (>):" >&2
  head -n 20 "$build/schedules.diff" >&2
  echo "(seed, passed, steps, replies, replies' digest, draws' digest; each reruns with" \
       "PERSERVE_SIM_SEED=<seed> <build>/tests/perserve_sim_tests)" >&2
  exit 1
fi
echo "sim-portability: the first $seeds seeds run the same under libstdc++ and libc++"
