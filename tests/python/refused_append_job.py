"""An actor's stream after a refused append (issue 33, finding 4), and steps
given as zero-row arrays (its second message): beside a server of n-step
items (--n-step 2), rank 1 appends 10 steps, then 1 step with an item the
server refuses (an item at 10, whose n-step successor 12 is not in), then
flushes: the refusal is
raised and steps_appended reads 10 at once, not 11. Then three appends of 5
steps in flight, the first refused: again 10 after the flush. Then items
with zero-row step arrays: accepted as no steps. Usage: python3 -m mpi4py
refused_append_job.py
"""
import numpy as np
from mpi4py import MPI

import perserve


def steps(actor, count: int, start: int) -> dict:
    return {"obs": np.full((count, 2), start % 256, np.uint8), "action": np.zeros(count, np.int64),
            "reward": np.ones(count, np.float32), "done": np.zeros(count, np.uint8)}


def expect_refused(actor) -> None:
    try:
        actor.flush()
    except perserve.InvalidArgumentError as error:
        print(f"refused as expected: {error}")
        return
    raise AssertionError("the append was not refused")


def act() -> None:
    with perserve.Actor() as actor:
        actor.append(steps(actor, 10, 0), items=list(range(8)))  # items 0..7: their successors (t + 2) are in
        actor.flush()
        assert actor.steps_appended == 10
        # One step more, and an item at 10 whose successor (12) is not in: the server refuses it.
        actor.append(steps(actor, 1, 10), items=[10])
        expect_refused(actor)
        assert actor.steps_appended == 10, actor.steps_appended
        # Three appends in flight, the first refused: the others are refused behind it.
        actor.append(steps(actor, 5, 10), items=[14])
        actor.append(steps(actor, 5, 15), items=[8])
        actor.append(steps(actor, 5, 20), items=[9])
        expect_refused(actor)
        assert actor.steps_appended == 10, actor.steps_appended
        # Two steps more, then items alone, the steps given as zero-row arrays: no steps.
        actor.append(steps(actor, 2, 10))
        actor.append(steps(actor, 0, 0), items=[8])
        actor.append(None, items=[9])
        actor.flush()
        assert actor.steps_appended == 12 and actor.items_acknowledged == 10, (actor.steps_appended,
                                                                             actor.items_acknowledged)
    print("steps_appended counted only acknowledged steps after each refusal; zero-row steps are no steps")


if __name__ == "__main__":
    if MPI.COMM_WORLD.rank == 1:
        act()
