#!/usr/bin/env bash
# Fetches, here, the Debian packages that scripts/gpu-check.sh needs on a GPU
# machine that cannot reach a package mirror (the workplace's H200 image has
# CUDA, CMake and a compiler, but no spdlog, fmt, GoogleTest or Google
# Benchmark). Writes them to .gpu-debs/ (git-ignored); send that folder with
# the working tree (the device tool's `carry`), and gpu-check.sh unpacks them
# into a private prefix there. Usage: scripts/gpu-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libgtest-dev libgmock-dev libbenchmark-dev
          libbenchmark1debian)
rm -rf .gpu-debs
mkdir -p .gpu-debs
(cd .gpu-debs && apt-get download "${packages[@]}")
du -sh .gpu-debs
