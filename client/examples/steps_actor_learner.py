"""A first program over step streams (docs/steps.md): actors append their
environment's steps, the server returns 3-step transitions.

    mpirun -np 1 perserve-server --column obs:float32:4 --column action:int64 \\
             --column reward:float32 --column done:uint8 --n-step 3 --discount 0.99 \\
             --min-size-to-sample 200 : \\
           -np 3 python3 -m mpi4py steps_actor_learner.py

Every rank but the last acts (a random walk standing in for an environment);
the last learns. An actor sends each step once, with the items its steps
complete: the 3-step transition at t once step t + 3 is in, or once the
episode has ended.
"""
import numpy as np
from mpi4py import MPI

import perserve

N_STEP = 3
STEPS = 3000
BATCHES = 40


def act() -> None:
    rng = np.random.default_rng(MPI.COMM_WORLD.rank)
    with perserve.Actor() as actor:
        obs, episode_start = rng.normal(size=4).astype(np.float32), 0
        steps = {"obs": [], "action": [], "reward": [], "done": []}
        items = []
        for t in range(STEPS):
            action = int(rng.integers(2))
            done = bool(rng.random() < 0.02)
            steps["obs"].append(obs)
            steps["action"].append(action)
            steps["reward"].append(1.0)
            steps["done"].append(done)
            # Items this step completes: the one N_STEP back, and at an episode's end its last ones.
            first = max(episode_start, t - N_STEP)
            items += [i for i in range(first, t + 1) if i == t - N_STEP or done]
            if done:
                obs, episode_start = rng.normal(size=4).astype(np.float32), t + 1
            else:
                obs = (obs + rng.normal(scale=0.1, size=4)).astype(np.float32)
            if len(steps["action"]) == 10:  # a request every 10 steps
                batch = {column.name: np.asarray(steps[column.name], dtype=column.dtype) for column in actor.schema}
                actor.append(batch, items=items, priorities=np.ones(len(items)))
                steps = {name: [] for name in steps}
                items = []
        actor.flush()
        print(f"actor {MPI.COMM_WORLD.rank}: {actor.steps_appended} steps, {actor.items_acknowledged} items")


def learn() -> None:
    with perserve.Learner() as learner:
        print("a sample holds", ", ".join(str(column) for column in learner.schema))
        for _ in range(BATCHES):
            sample = learner.sample(32, beta=0.4)
            target = sample.columns["return"] + sample.columns["discount"] * 0.0  # + discount * max Q(next_obs)
            assert sample.columns["next_obs"].shape == (32, 4) and target.shape == (32,)
            learner.update_priorities(sample.keys, np.abs(target) + 0.1)
        print(f"learner: {BATCHES} samples of 32 3-step transitions, updates {learner.flush()}")


if MPI.COMM_WORLD.rank == MPI.COMM_WORLD.size - 1:
    learn()
else:
    act()
