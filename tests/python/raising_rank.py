"""A job whose Python rank raises (tests/python/run_raising_job.py runs it).

    raising_rank.py actor    rank 1, an actor, raises after joining; rank 2, a
                             learner, waits for a sample that never comes
    raising_rank.py learner  rank 2, the learner, raises after joining; rank 1,
                             an actor, adds for ever

Either way the job must end: run with `python3 -m mpi4py`, mpi4py aborts the
job on the uncaught exception; run with plain `python3`, the hook the perserve
package installs at a client's join does.
"""
import sys

import numpy as np
from mpi4py import MPI

import perserve

raising = sys.argv[1]
if MPI.COMM_WORLD.rank == 1:
    actor = perserve.Actor(MPI.COMM_WORLD)
    if raising == "actor":
        raise RuntimeError("deliberate failure on the actor rank")
    while True:  # until the job is aborted
        actor.add({"obs": np.zeros((50, 4), np.float32), "action": np.zeros(50, np.int64),
                   "reward": np.zeros(50, np.float32), "next_obs": np.zeros((50, 4), np.float32),
                   "done": np.zeros(50, np.uint8)})
learner = perserve.Learner(MPI.COMM_WORLD)
if raising == "learner":
    raise RuntimeError("deliberate failure on the learner rank")
learner.sample(8, 0.4)  # the replay stays empty: waits until the job is aborted
