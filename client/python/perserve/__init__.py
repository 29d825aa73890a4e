"""perserve: a prioritized experience replay server over MPI, from Python.

    from mpi4py import MPI
    import perserve

    with perserve.Actor(MPI.COMM_WORLD) as actor:      # collective join
        actor.add({"obs": obs, "action": action, ...}, priorities=p)

    with perserve.Learner(MPI.COMM_WORLD, prefetch=2) as learner:
        batch = learner.sample(512, beta=0.4, timeout=30.0)   # DeadlineExceededError past it
        learner.update_priorities(batch.keys, new_priorities)

Run under mpirun beside perserve-server, with ``python3 -m mpi4py script.py``
so that an uncaught exception on one rank aborts the whole job.
"""
from .client import Actor, Bystander, Column, Learner, ReplayInfo, Sample, UpdateResult, join_bystander
from .weights import WeightBroadcast
from .errors import (Error, FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
                     OutOfRangeError, ResourceExhaustedError, UnavailableError, UnimplementedError,
                     DeadlineExceededError)

__all__ = [
    "Actor", "Learner", "Bystander", "join_bystander", "Column", "Sample", "UpdateResult", "ReplayInfo",
    "WeightBroadcast",
    "Error", "InvalidArgumentError", "OutOfRangeError", "FailedPreconditionError", "UnavailableError",
    "InternalError", "NotFoundError", "UnimplementedError", "ResourceExhaustedError", "DeadlineExceededError",
]
__version__ = "0.1.0"
