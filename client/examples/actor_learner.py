"""A first perserve program in Python: the last rank learns, the others act.

    mpirun -np 1 build/server/perserve-server : -np 3 python3 -m mpi4py client/examples/actor_learner.py
(with PYTHONPATH=build/python; the server's default schema is CartPole-like).
Installed as P/share/perserve/examples/actor_learner.py; run it there with
PYTHONPATH=P/lib/python3/site-packages and P/bin/perserve-server.
"""
from mpi4py import MPI
import numpy as np

import perserve

comm = MPI.COMM_WORLD
if comm.rank == comm.size - 1:
    with perserve.Learner(comm, prefetch=2) as learner:
        for step in range(50):
            batch = learner.sample(64, beta=0.4)  # batch.columns["obs"]: float32 (64, 4), no copy
            td_errors = np.abs(batch.columns["reward"] - 0.5) + 1e-3  # stand-in for a training step
            learner.update_priorities(batch.keys, td_errors)  # does not wait for the server
        print("learner:", batch, "updates:", learner.flush())
else:
    rng = np.random.default_rng(comm.rank)
    with perserve.Actor(comm) as actor:
        for episode_step in range(20):
            n = 50
            obs = rng.random((n, 4), dtype=np.float32)
            actor.add({"obs": obs, "action": rng.integers(0, 2, n), "reward": rng.random(n, dtype=np.float32),
                       "next_obs": obs + 0.01, "done": (rng.random(n) < 0.05).astype(np.uint8)})
        actor.flush()
        print("actor:", actor)
