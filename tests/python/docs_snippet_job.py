"""docs/steps.md's Python snippet, run as it stands (issue 33, finding 6).

Rank 1 takes the first ```python block of the "Appending and creating items"
section from docs/steps.md, runs it, and drives its append_step through
episodes that end terminal (done 1) and truncated (done 2, the bootstrap
step appended), each in its own way; every append must be acknowledged, and
every step but a bootstrap step must make exactly one item. Rank 2 samples
and checks each n-step transition's discount and next_obs (each frame
holds its step's index). Usage (beside a server of --n-step 3 with an obs
column of uint8:4): python3 -m mpi4py docs_snippet_job.py DOCS_STEPS_MD
"""
import re
import sys

import numpy as np
from mpi4py import MPI

import perserve

EPISODES = 60


def snippet(path: str) -> str:
    text = open(path).read()
    section = text[text.index("## Appending and creating items"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def act(code: str) -> None:
    rng = np.random.default_rng(7)
    scope = {"perserve": perserve, "np": np}
    exec(code, scope)  # defines actor, episode_start, append_step
    actor, append_step = scope["actor"], scope["append_step"]
    bootstraps = 0
    for episode in range(EPISODES):
        length = int(rng.integers(1, 9))
        truncated = episode % 3 == 1
        for j in range(length):
            step = actor.steps_appended
            frame = np.array([step % 256, step // 256, 7, 7], dtype=np.uint8)  # the step's index
            last = j == length - 1
            done = 0 if not last else (2 if truncated else 1)
            append_step(frame, int(rng.integers(4)), float(step), done, lambda ready: np.ones(len(ready)))
            bootstraps += done == 2
        actor.flush()  # raises on any refused append
    steps = actor.steps_appended
    assert actor.items_acknowledged == steps - bootstraps, (actor.items_acknowledged, steps, bootstraps)
    actor.close()
    MPI.COMM_WORLD.send(steps, dest=2)
    print(f"the docs' snippet appended {steps} steps ({bootstraps} bootstrap steps), "
          f"{steps - bootstraps} items, none refused")


def learn() -> None:
    with perserve.Learner() as learner:  # joins beside the actor's join (collective)
        MPI.COMM_WORLD.recv(source=1)  # the actor has appended everything
        for _ in range(20):
            batch = learner.sample(64, beta=0.4)
            index = lambda frames: frames[:, 0].astype(int) + 256 * frames[:, 1].astype(int)
            t, after = index(batch.columns["obs"]), index(batch.columns["next_obs"])
            discount = batch.columns["discount"]
            for i in range(len(batch.keys)):
                if discount[i] == 0.0:  # the episode ended (terminal): no next observation
                    assert not batch.columns["next_obs"][i].any(), batch.columns["next_obs"][i]
                else:  # t + n', n' in 1 .. 3 (a truncated episode's bootstrap step within)
                    assert 1 <= after[i] - t[i] <= 3, (t[i], after[i])
                    assert np.isclose(discount[i], 0.99 ** (after[i] - t[i])), (discount[i], after[i] - t[i])
    print("learner: every sampled item whole")


if __name__ == "__main__":
    if MPI.COMM_WORLD.rank == 1:
        act(snippet(sys.argv[1]))
    elif MPI.COMM_WORLD.rank == 2:
        learn()
