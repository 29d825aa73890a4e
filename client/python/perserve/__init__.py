"""perserve: a prioritized experience replay server over MPI, from Python.

    from mpi4py import MPI
    import perserve

    with perserve.Actor(MPI.COMM_WORLD) as actor:      # collective join
        actor.add({"obs": obs, "action": action, ...}, priorities=p)

    with perserve.Learner(MPI.COMM_WORLD, prefetch=2) as learner:
        batch = learner.sample(512, beta=0.4, timeout=30.0)   # DeadlineExceededError past it
        learner.update_priorities(batch.keys, new_priorities)

Run under perserve-launch (or mpirun) beside perserve-server, with
``python3 -m mpi4py script.py`` so that an uncaught exception on one rank
aborts the whole job (perserve-launch does that for a ``.py`` file).

The clients load on first use (``perserve.Actor``): importing the package
alone does not import mpi4py, so ``perserve.launch``, which starts the MPI
job, never initializes MPI itself.
"""
from .errors import (Error, FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
                     OutOfRangeError, ResourceExhaustedError, UnavailableError, UnimplementedError,
                     DeadlineExceededError)

__all__ = [
    "Actor", "Learner", "Bystander", "join_bystander", "Column", "Sample", "UpdateResult", "ReplayInfo",
    "Items", "WeightBroadcast",
    "Error", "InvalidArgumentError", "OutOfRangeError", "FailedPreconditionError", "UnavailableError",
    "InternalError", "NotFoundError", "UnimplementedError", "ResourceExhaustedError", "DeadlineExceededError",
]
__version__ = "0.1.0"

# Each name's module: imported (mpi4py, and MPI_Init with it) on first use.
_LAZY = {name: ".client" for name in ("Actor", "Learner", "Bystander", "join_bystander", "Column", "Sample",
                                      "UpdateResult", "ReplayInfo", "Items")}
_LAZY["WeightBroadcast"] = ".weights"


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'perserve' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
