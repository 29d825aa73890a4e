"""An actor the server's rate limiter holds back need not wait in add:
add(block=False) returns False and sends nothing while max_in_flight batches
are held, and True again once the learner's samples let them through.
Run (tests/CMakeLists.txt, python_rate_limited_add): rank 0 perserve-server
with --samples-per-insert 1 --error-buffer 100 --min-size-to-sample 100
--column id:int64, rank 1 the actor, rank 2 the learner."""
import time

import numpy as np
from mpi4py import MPI

import perserve

comm = MPI.COMM_WORLD
if comm.rank == 1:
    with perserve.Actor(comm, max_in_flight=2) as actor:
        peers = actor.peers()
        sent = 0
        while actor.add({"id": np.arange(50)}, block=False):
            sent += 1
            assert sent < 1000, "the rate limiter never held an add back"
        held_at = actor.items_acknowledged
        peers.Barrier()  # the learner samples now
        deadline = time.monotonic() + 20
        while not actor.add({"id": np.arange(50)}, block=False):
            assert time.monotonic() < deadline, "no add went through after the learner sampled"
            time.sleep(0.01)
        actor.flush()
        assert actor.items_acknowledged > held_at
        print(f"actor: add(block=False) returned False after {sent} batches, True again once sampled", flush=True)
        peers.Barrier()
        peers.Free()
else:
    with perserve.Learner(comm, prefetch=0) as learner:
        peers = learner.peers()
        peers.Barrier()
        for _ in range(2):  # 64 samples of the 100 items in: within the limiter's allowance
            learner.sample(32, beta=0.4, timeout=20.0)
        peers.Barrier()
        peers.Free()
