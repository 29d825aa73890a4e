"""Checkpoints of step streams end to end: a job of two actors and a learner
appends steps and creates items, the learner asks for a checkpoint once the
actors have flushed; a second job restores it (--restore), its actors
continue their streams from steps_appended, and every item the learner
samples, restored or new, equals the NumPy reference of steps_job.py.

    python3 steps_checkpoint_job.py drive MPIEXEC SERVER PYTHON DIR MODE

runs both jobs (mpirun twice, the server with steps_job.py's MODE flags);
each job's ranks run this file as `-m mpi4py steps_checkpoint_job.py PHASE
MODE` (PHASE 1 or 2). After the restore each stream's next step begins a new
episode (docs/steps.md): the reference starts every stream's episode anew at
the step count it had at the checkpoint.

Mode "tables": steps_job.py's three tables over one ring (apex: n-step items
under the lowest-priority remover; r2d2: sequences drawn from a max-heap;
recent: a LIFO table of the steps themselves), every table in the
checkpoint (format 4); the learner checks each table's samples.
"""
import os
import subprocess
import sys

import mpi4py
import numpy as np

mpi4py.rc.initialize = sys.argv[1] != "drive"  # the driver starts mpirun: it must not be an MPI process itself
import steps_job as ref  # noqa: E402  (after the rc setting)

APPENDS = 100  # per actor and job: about 450 steps each, the ring (197) wraps
BATCHES = 20
BATCH = 32
RESTORED_AT = {}  # actor -> its stream's steps at the checkpoint (the second job)


def sizes(actor: int) -> list:
    """Each append's steps, both jobs: a function of the actor."""
    rng = np.random.default_rng(1000 + actor)
    return [int(rng.integers(1, 9)) for _ in range(2 * APPENDS)]


def checkpointed_steps(actor: int) -> int:
    return sum(sizes(actor)[:APPENDS])


def episode_start(actor: int, index: int) -> int:
    """steps_job's, with a new episode at the restore."""
    floor = RESTORED_AT.get(actor, 0)
    floor = floor if index >= floor else 0
    start = index
    while start > floor and not ref.episode_ends(actor, start - 1):
        start -= 1
    return start


ref.episode_start = episode_start  # stacked(), item_steps() and the expectations read it


def check_tables(learner, batches: int) -> int:
    """Mode "tables": each table in turn, against its layout's reference."""
    checked = 0
    for b in range(batches):
        for table in ("apex", "r2d2", "recent"):
            sample = learner.sample(BATCH, beta=0.5, timeout=60.0, table=table)
            assert sample.table == table, sample.table
            for i in range(sample.size):
                if table == "recent":
                    ref.check_step(sample, i, f"batch {b}")
                else:
                    mode_name, mode = ref.TABLES[table]
                    ref.check_item(sample, i, mode_name, mode, f"batch {b} table {table}")
                checked += 1
            if table != "recent":  # lifo keeps no priorities
                learner.update_priorities(sample.keys, np.full(sample.size, 0.5 + b % 3), table=table)
    return checked


def check(learner, mode: dict, mode_name: str, batches: int) -> int:
    if mode_name == "tables":
        return check_tables(learner, batches)
    checked = 0
    for b in range(batches):
        sample = learner.sample(BATCH, beta=0.5, timeout=60.0)
        for i in range(sample.size):
            ref.check_item(sample, i, mode_name, mode, f"batch {b}")
            checked += 1
        learner.update_priorities(sample.keys, np.full(sample.size, 0.5 + b % 3))
    return checked


def run_actor(actor: int, phase: int, mode: dict) -> None:
    import perserve
    from mpi4py import MPI
    rng = np.random.default_rng(actor + 10 * phase)
    with perserve.Actor(MPI.COMM_WORLD) as a:
        peers = a.peers()
        actors = peers.Split(0, actor)  # as steps_job's: neither outruns the other by a ring
        first = 0 if phase == 1 else checkpointed_steps(actor)
        assert a.steps_appended == first, (phase, a.steps_appended, first)
        peers.Barrier()  # the learner checked the restored items first
        made = {"apex": first, "r2d2": first} if mode is None else first
        for appends, size in enumerate(sizes(actor)[(phase - 1) * APPENDS:phase * APPENDS]):
            if appends % 4 == 3:
                actors.Barrier()
            if mode is None:
                ref.append_to_tables(a, actor, size, made, rng)
            else:
                made = ref.append_steps(a, actor, size, made, mode, rng)
        a.flush()
        peers.Barrier()  # the learner checkpoints after this
        peers.Barrier()
        actors.Free()
        peers.Free()


def run_learner(phase: int, mode: dict, mode_name: str) -> None:
    import perserve
    from mpi4py import MPI
    with perserve.Learner(MPI.COMM_WORLD, prefetch=1) as learner:
        peers = learner.peers()
        peers.Split(1, 0).Free()  # the actors' communicator is theirs alone
        checked = check(learner, mode, mode_name, 4) if phase == 2 else 0  # the restored items alone
        peers.Barrier()
        checked += check(learner, mode, mode_name, BATCHES)
        peers.Barrier()
        if phase == 1:
            paths = learner.checkpoint()
            assert len(paths) == 1 and paths[0], paths
        checked += check(learner, mode, mode_name, 4)
        peers.Barrier()
        peers.Free()
        learner.flush()
    print(f"steps_checkpoint_job {mode_name} job {phase}: {checked} sampled items equal the NumPy reference",
          flush=True)


def drive(mpiexec: str, server: str, python: str, directory: str, mode_name: str) -> None:
    mode = ref.MODES.get(mode_name)
    flags = ["--column", "obs:uint8:6,5", "--column", "action:int32", "--column", "reward:float32",
             "--column", "done:uint8", "--capacity", "197", "--min-size-to-sample", "1", "--stats-interval", "0",
             "--checkpoint-dir", directory]
    if mode_name == "tables":
        apex, r2d2 = ref.TABLES["apex"][1], ref.TABLES["r2d2"][1]
        flags += ["--table", f"apex:n_step={apex['n']},discount={apex['discount']},stack=obs:{apex['stack']},"
                             "remover=min_heap,min_size=1",
                  "--table", f"r2d2:sequence_length={r2d2['length']},sequence_period={r2d2['period']},"
                             f"stack=obs:{r2d2['stack']},item_column=state:float32:3,sampler=max_heap,min_size=1",
                  "--table", "recent:sampler=lifo,max_items=64,min_size=1"]
    elif mode_name == "nstep":
        flags += ["--n-step", str(mode["n"]), "--discount", str(mode["discount"]), "--stack", f"obs:{mode['stack']}"]
    else:
        flags += ["--sequence-length", str(mode["length"]), "--sequence-period", str(mode["period"]),
                  "--stack", f"obs:{mode['stack']}", "--item-column", "state:float32:3"]
    subprocess.run(["rm", "-rf", directory], check=True)
    for phase in (1, 2):
        command = [mpiexec, "-np", "1", server, *flags, *(["--restore", directory] if phase == 2 else []), ":",
                   "-np", "3", python, "-m", "mpi4py", os.path.abspath(__file__), str(phase), mode_name]
        job = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
        print(job.stdout, flush=True)
        if job.returncode != 0 or f"job {phase}:" not in job.stdout:
            sys.exit(f"job {phase} failed ({job.returncode})")
        if phase == 2 and "restored" not in job.stdout:
            sys.exit("the second job did not restore")
    print(f"steps_checkpoint_job {mode_name}: both jobs equal the NumPy reference")


def main() -> None:
    if sys.argv[1] == "drive":
        drive(*sys.argv[2:7])
        return
    from mpi4py import MPI
    phase, mode_name = int(sys.argv[1]), sys.argv[2]
    mode = ref.MODES.get(mode_name)  # None: mode "tables"
    if phase == 2:
        RESTORED_AT.update({actor: checkpointed_steps(actor) for actor in (0, 1)})
    rank = MPI.COMM_WORLD.rank  # the server first, then the two actors, then the learner
    if rank in (1, 2):
        run_actor(rank - 1, phase, mode)
    else:
        run_learner(phase, mode, mode_name)


if __name__ == "__main__":
    main()
