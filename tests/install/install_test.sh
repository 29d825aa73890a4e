#!/usr/bin/env bash
# Installs a built perserve into a fresh prefix and uses it from outside:
#   1. cmake --install <build> --prefix P
#   2. the consumer projects (find_package(perserve REQUIRED)) configure and build against P:
#      a C++ one, and a C one with no C++ enabled
#   3. the same C program builds with `pkg-config --cflags --libs perserve`
#   4. all four run under mpirun beside P/bin/perserve-server
#   5. the installed Python package imports from P (the extension finds P/lib)
#   6. the installed first example runs from P/share/perserve/examples with
#      PYTHONPATH=P/lib/python3/site-packages, as docs/status.md's Installing says
# Usage: install_test.sh <build-dir> <python3>
set -euo pipefail
build=$(cd "$1" && pwd)
python=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" >/dev/null
cmake -S "$here/consumer_c" -B "$work/consumer_c_cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer_c_cmake" >/dev/null
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
cc -o "$work/consumer_c" "$here/consumer/consumer_c.c" $(pkg-config --cflags --libs perserve)

mpirun -np 1 "$prefix/bin/perserve-server" --column id:int64 --column x:float32:2 --min-size-to-sample 100 \
         --stats-interval 0 : \
       -np 1 "$work/consumer/consumer" actor : \
       -np 1 "$work/consumer/consumer" learner : \
       -np 1 "$work/consumer_c" : \
       -np 1 "$work/consumer_c_cmake/consumer_c"

site=$(find "$prefix" -type d -name perserve -path '*site-packages*' | head -1)
PYTHONPATH=$(dirname "$site") "$python" -c \
  "import perserve, perserve._perserve as ext; assert ext.__file__.startswith('$prefix'), ext.__file__; print('installed perserve imports from', ext.__file__)"
mpirun -np 1 "$prefix/bin/perserve-server" --stats-interval 0 : \
       -np 2 env PYTHONPATH="$prefix/lib/python3/site-packages" "$python" -m mpi4py \
         "$prefix/share/perserve/examples/actor_learner.py"
echo "install_test: OK"
