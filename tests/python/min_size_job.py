"""The default minimum size to sample is one the table reaches (issue 33,
finding 1): a server of n-step items (--n-step 3 --capacity 500) or of
sequences (--sequence-length 80 --sequence-period 40 --capacity 20000) given
no --min-size-to-sample, one actor appending one long episode (four ring's
worth of steps) with every item it can, then closing; the learner's sample
must be served, not wait for ever for items a full ring cannot hold whole.
Usage: python3 -m mpi4py min_size_job.py nstep|sequence
"""
import sys

import numpy as np
from mpi4py import MPI

import perserve


def act(mode: str) -> None:
    with perserve.Actor() as actor:
        capacity, period, span = (500, 1, 3) if mode == "nstep" else (20000, 40, 79)
        steps = 4 * capacity
        for first in range(0, steps, 100):
            count = min(100, steps - first)
            batch = {"obs": np.zeros((count, 2), np.uint8), "action": np.zeros(count, np.int64),
                     "reward": np.ones(count, np.float32), "done": np.zeros(count, np.uint8)}
            last = first + count - 1
            # Every item whose steps are all in by now (one episode, never ending).
            items = [t for t in range(max(0, first - span), last - span + 1) if t % period == 0 and t + span > first - 1]
            actor.append(batch, items=items)
        actor.flush()
    MPI.COMM_WORLD.send(steps, dest=2)


def learn() -> None:
    with perserve.Learner() as learner:
        MPI.COMM_WORLD.recv(source=1)
        info = learner.info()
        batch = learner.sample(16, beta=0.4, timeout=30.0)
        print(f"sampled {len(batch.keys)} of the {info.size} items held: the default minimum size was reached")


if __name__ == "__main__":
    if MPI.COMM_WORLD.rank == 1:
        act(sys.argv[1])
    elif MPI.COMM_WORLD.rank == 2:
        learn()
