"""pip install . : builds perserve with CMake and installs it into the environment.

    pip install --no-build-isolation .      # offline, with Debian's setuptools and wheel

What lands where (the prefix is the venv, ~/.local or /usr/local):
  site-packages/perserve/        the Python package and its extension (_perserve)
  bin/perserve-server            the replay server, on PATH with the environment's own scripts
  bin/perserve-launch            the launcher (a console script: perserve.launch)
  lib/libperserve_client.so*     the client library (the extension finds it at $ORIGIN/../../..)
  lib/libperserve_tree.so        the priority tree's C ABI
  include/perserve/, lib/cmake/perserve/, lib/pkgconfig/perserve.pc
                                 for C and C++ programs: find_package(perserve) with
                                 CMAKE_PREFIX_PATH=<prefix>, or pkg-config
  share/perserve/examples/       the examples
`pip uninstall perserve` removes every one of them (they are in the wheel's RECORD).

The CMake build goes to build-pip/ (configured once, rebuilt incrementally on
the next pip install), without tests or benchmarks. Settings:
  PERSERVE_BUILD_DIR=DIR    build in DIR instead; an already configured DIR is
                            built and installed as it is (the ctest pip_install_venv
                            reuses the test build this way)
  PERSERVE_CMAKE_ARGS="..." more cmake -D options (e.g. -DPERSERVE_ENABLE_CUDA=OFF)
  CMAKE_BUILD_PARALLEL_LEVEL=N  build jobs (default: every core)
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.abspath(os.environ.get("PERSERVE_BUILD_DIR") or os.path.join(ROOT, "build-pip"))
# Every target an install needs: the install rules name all four.
TARGETS = ["perserve-server", "perserve_client", "perserve_tree", "perserve_python_module"]
# Where the CMake install puts the package, three levels under the prefix
# as in an environment (lib/python3.X/site-packages), so the extension's
# RPATH $ORIGIN/../../.. is the prefix's lib/ in both.
PYTHON_DIR = "lib/python3/site-packages"
os.makedirs(BUILD_DIR, exist_ok=True)  # setuptools' egg_info writes there first


def run(command: list) -> None:
    print("perserve setup.py:", shlex.join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def cmake_build_and_stage(stage: str) -> None:
    """Configures (unless BUILD_DIR is configured already), builds TARGETS
    and installs them into `stage`."""
    if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")):
        run(["cmake", "-S", ROOT, "-B", BUILD_DIR, "-DCMAKE_BUILD_TYPE=Release", "-DPERSERVE_BUILD_TESTS=OFF",
             "-DPERSERVE_BUILD_BENCHMARKS=OFF", f"-DPYTHON_EXECUTABLE={sys.executable}",
             f"-DPERSERVE_PYTHON_INSTALL_DIR={PYTHON_DIR}",
             *shlex.split(os.environ.get("PERSERVE_CMAKE_ARGS", ""))])
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    run(["cmake", "--build", BUILD_DIR, "-j", jobs, "--target", *TARGETS])
    shutil.rmtree(stage, ignore_errors=True)
    run(["cmake", "--install", BUILD_DIR, "--prefix", stage])


class BuildWithCMake(build_py):
    """build_py, with the package taken from the CMake install (the .py files
    and the extension) and the rest of the install tree as data files."""

    def run(self) -> None:
        stage = os.path.join(BUILD_DIR, "pip-stage")
        cmake_build_and_stage(stage)
        package = os.path.join(stage, PYTHON_DIR, "perserve")
        target = os.path.join(self.build_lib, "perserve")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(package, target)
        data = {}
        for directory, _, files in os.walk(stage):
            relative = os.path.relpath(directory, stage)
            if relative == os.path.join(PYTHON_DIR, "perserve") or not files:
                continue
            data[relative] = [os.path.join(directory, f) for f in sorted(files)]
        self.distribution.data_files = sorted(data.items())


class BinaryDistribution(Distribution):
    """A wheel for this Python and platform: the package carries an extension."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=BinaryDistribution,
    packages=["perserve"],
    package_dir={"perserve": "client/python/perserve"},
    cmdclass={"build_py": BuildWithCMake},
    options={"build": {"build_base": os.path.join(BUILD_DIR, "setuptools")},
             "bdist_wheel": {"bdist_dir": os.path.join(BUILD_DIR, "setuptools", "bdist")},
             "egg_info": {"egg_base": BUILD_DIR}},
)
