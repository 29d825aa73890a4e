"""A job whose Python rank raises (tests/python/test_raising_job.py runs it):
rank 1, an actor, raises after joining; rank 2, a learner, waits for a sample
that never comes. Run with `python3 -m mpi4py`, the uncaught exception
aborts the whole job instead of leaving the others waiting."""
from mpi4py import MPI

import perserve

if MPI.COMM_WORLD.rank == 1:
    actor = perserve.Actor(MPI.COMM_WORLD)
    raise RuntimeError("deliberate failure on the actor rank")
learner = perserve.Learner(MPI.COMM_WORLD)
learner.sample(8, 0.4)  # the replay stays empty: waits until the job is aborted
