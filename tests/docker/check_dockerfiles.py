#!/usr/bin/python3
"""The Docker images install what scripts/install-deps.sh installs: every
package of its list appears in the build stage of both Dockerfiles.

Usage: check_dockerfiles.py REPO_ROOT
"""
import os
import re
import sys


def install_deps_packages(root):
    text = open(os.path.join(root, "scripts", "install-deps.sh")).read()
    body = re.search(r"packages=\(\n(.*?)\n\)", text, re.S).group(1)
    return set(body.split())


def build_stage_packages(path):
    """Package names on the `apt-get install` lines of the first (build) stage."""
    text = open(path).read().replace("\\\n", " ")
    build_stage = re.split(r"\nFROM ", "\n" + text)[1]
    found = set()
    for line in build_stage.splitlines():
        for command in line.split("&&"):
            words = command.split()
            if words[:2] == ["apt-get", "install"]:
                found.update(w for w in words[2:] if not w.startswith("-"))
    return found


def main():
    root = sys.argv[1]
    wanted = install_deps_packages(root)
    failures = 0
    for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
        missing = wanted - build_stage_packages(os.path.join(root, "docker", name))
        if missing:
            print(f"{name}: missing packages of scripts/install-deps.sh: {' '.join(sorted(missing))}")
            failures += 1
        else:
            print(f"{name}: all {len(wanted)} packages of scripts/install-deps.sh present")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
