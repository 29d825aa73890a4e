"""A Python client whose last request the server rejects and that is never
closed by its owner (tests/python/run_unclosed_jobs.py runs it beside
perserve-server --column id:int64 --capacity 1000). Whatever closes it then
must print the rejection with the rank, and the interpreter must exit 1.

    unclosed_rejected.py dropped   an actor, a local of a function, adds 2,000
                                   items (over the capacity) and is dropped
                                   unclosed: its destructor closes it
    unclosed_rejected.py exit      an actor kept to interpreter exit adds with
                                   a priority 0: the atexit handler closes it
    unclosed_rejected.py finalize  the same actor, then MPI.Finalize() by hand:
                                   the C++ library's hook closes it
    unclosed_rejected.py learner   a learner kept to interpreter exit sends an
                                   update of a key never issued, no wait
    unclosed_rejected.py clean     an actor kept to exit whose adds are all
                                   stored: closed at exit, status 0
"""
import sys

import numpy as np
from mpi4py import MPI

import perserve

kept = None  # a client left open until interpreter exit


def add_dropped_unclosed() -> None:
    actor = perserve.Actor(MPI.COMM_WORLD)
    actor.add({"id": np.arange(2000, dtype=np.int64)})


def main() -> None:
    global kept
    mode = sys.argv[1]
    if mode == "dropped":
        add_dropped_unclosed()
    elif mode in ("exit", "finalize"):
        kept = perserve.Actor(MPI.COMM_WORLD)
        kept.add({"id": np.arange(10, dtype=np.int64)}, priorities=np.zeros(10))
        if mode == "finalize":
            MPI.Finalize()
    elif mode == "learner":
        kept = perserve.Learner(MPI.COMM_WORLD)
        kept.update_priorities(np.array([1 << 40], dtype=np.uint64), [1.0])
    elif mode == "clean":
        kept = perserve.Actor(MPI.COMM_WORLD)
        kept.add({"id": np.arange(10, dtype=np.int64)})
    else:
        sys.exit(f"unknown mode {mode}")


main()
