"""Step streams end to end (issue 27): a server of step streams under mpirun,
two actors appending steps and creating items, one learner checking every
sampled item bit for bit against a plain NumPy reference.

    mpirun -np S perserve-server <flags of MODES[mode]> :
           -np 3 python3 -m mpi4py steps_job.py MODE S

(S server ranks, 1 when not given: with 2, each actor appends to its own
shard and the learner samples over both.)

Mode "tables": one server of three tables over its one step ring (issue 34),
fed by the same appends: "apex" (prioritized n-step items, as mode nstep),
"r2d2" (uniform sequences with an item column, as mode sequence, its own
stack depth) and "recent" (a LIFO table of the steps themselves, 64 at most).
Each append creates items in all three; the learner samples each table in
turn and checks every item against the reference of the table's layout.
With 2 server ranks the uniform and LIFO tables are sampled over both shards
too (a part a shard, by size: docs/shards.md), and each of their samples'
keys must name both shards over the job.

Every step's content is a function of (actor, stream index), and a frame's
first bytes name both, so the learner decodes each sampled item's actor and
step from its newest frame and recomputes the whole item from the stream's
definition: stacked frames (zeros before the episode's first step), the
n-step return and discount, the next observation, a sequence's steps and
mask. A frame from another actor or episode, or from a step the ring has
overwritten since, differs. The ring is small (--capacity 197), so it wraps
many times and evicts items while the learner samples; the actors keep within
a few batches of each other (a barrier every 4 appends), as actors stepping
environments at similar speeds do, so neither outruns the other by a ring.
"""
import sys

import numpy as np
from mpi4py import MPI

import perserve

FRAME = (6, 5)
MODES = {
    # flags the server runs with (tests/CMakeLists.txt passes the same)
    "nstep": dict(n=3, discount=0.875, stack=4, length=0, period=0, item_columns=False),
    "sequence": dict(n=0, discount=0.0, stack=2, length=5, period=2, item_columns=True),
}
# Mode "tables": each table's layout, as the server's --table specs give it.
TABLES = {"apex": ("nstep", MODES["nstep"]), "r2d2": ("sequence", MODES["sequence"])}
# A third argument "first": the server runs with --stack-axis first (frames on a new first axis).
FRAMES_FIRST = len(sys.argv) > 3 and sys.argv[3] == "first"
APPENDS_PER_ACTOR = 340  # of 1 to 8 steps: about 1500 steps each
BATCHES = 60
BATCH = 32


def done_value(actor: int, index: int) -> int:
    """Episodes of 1 to 11 steps, a function of the step: 1 where one ends
    (terminal), 2 where one is cut off (this step holds the observation it was
    cut off at: a truncated episode's bootstrap step), else 0."""
    if (index * 7 + actor * 3) % 11 == 0:
        return 1
    return 2 if (index * 13 + actor) % 17 == 0 else 0


def episode_ends(actor: int, index: int) -> bool:
    return done_value(actor, index) != 0


def frame(actor: int, index: int) -> np.ndarray:
    values = (np.arange(np.prod(FRAME)) * 31 + index * 7 + actor * 101) % 251 + 1
    out = values.astype(np.uint8).reshape(FRAME)
    out[0, 0], out[0, 1], out[0, 2] = actor + 1, index % 256, index // 256
    return out


def step(actor: int, index: int) -> dict:
    return {
        "obs": frame(actor, index),
        "action": np.int32(index * 3 + actor),
        "reward": np.float32((index % 9) * 0.375 - 1.0 + actor),
        "done": np.uint8(done_value(actor, index)),
    }


def episode_start(actor: int, index: int) -> int:
    start = index
    while start > 0 and not episode_ends(actor, start - 1):
        start -= 1
    return start


def episode_last(actor: int, index: int, limit: int) -> int:
    """The episode's last step, or -1 if it has not ended below `limit`."""
    for i in range(index, limit):
        if episode_ends(actor, i):
            return i
    return -1


def stacked(actor: int, index: int, depth: int) -> np.ndarray:
    start = episode_start(actor, index)
    frames = [frame(actor, i) if i >= start else np.zeros(FRAME, np.uint8) for i in range(index - depth + 1, index + 1)]
    if depth == 1:
        return frames[0]
    return np.stack(frames, axis=0 if FRAMES_FIRST else -1)


def expected_nstep(actor: int, t: int, mode: dict) -> dict:
    n, discount = mode["n"], mode["discount"]
    ret, g, n_used, terminal = 0.0, 1.0, n, False
    for j in range(n):
        done = done_value(actor, t + j)
        if done == 2:  # truncated: bootstrap from this step, without its reward
            n_used = j
            break
        ret += g * float(step(actor, t + j)["reward"])
        g *= discount
        if done == 1:
            n_used, terminal = j + 1, True
            break
    return {
        "obs": stacked(actor, t, mode["stack"]),
        "action": np.int32(t * 3 + actor),
        "return": np.float64(ret),
        "discount": np.float64(0.0 if terminal else g),
        "next_obs": (np.zeros_like(stacked(actor, t, mode["stack"])) if terminal
                     else stacked(actor, t + n_used, mode["stack"])),
    }


def expected_sequence(actor: int, t: int, mode: dict) -> dict:
    length = mode["length"]
    last = episode_last(actor, t, t + length)
    out = {"obs": [], "action": [], "reward": [], "done": [], "mask": []}
    for j in range(length):
        inside = last < 0 or t + j <= last
        s = step(actor, t + j) if inside else None
        out["obs"].append(stacked(actor, t + j, mode["stack"]) if inside
                          else np.zeros_like(stacked(actor, t, mode["stack"])))
        out["action"].append(s["action"] if inside else np.int32(0))
        out["reward"].append(s["reward"] if inside else np.float32(0))
        out["done"].append(s["done"] if inside else np.uint8(0))
        out["mask"].append(np.uint8(inside))
    result = {name: np.array(values) for name, values in out.items()}
    result["state"] = np.array([actor, t, t * 2 + 1], np.float32)
    return result


def item_steps(actor: int, appended: int, made: int, mode: dict) -> list:
    """The steps below `appended` (from `made` on) whose items can be created now."""
    ready = []
    for t in range(made, appended):
        if done_value(actor, t) == 2:
            continue  # a bootstrap step: no item starts there
        if mode["length"]:
            if (t - episode_start(actor, t)) % mode["period"] != 0:
                continue
            need = mode["length"]
        else:
            need = mode["n"] + 1  # obs at t + n
        last = episode_last(actor, t, appended)
        if t + need - 1 < appended or 0 <= last < t + need - 1:
            ready.append(t)
        else:
            break  # later steps need more steps too
    return ready


def check_item(sample, i: int, mode_name: str, mode: dict, where: str) -> None:
    """Sampled item i, bit for bit against the reference: its actor and step
    decoded from its newest frame (a sequence's first step's)."""
    newest = sample.columns["obs"][i]
    newest = newest[0] if mode_name == "sequence" else newest
    if mode["stack"] > 1:
        newest = newest[-1] if FRAMES_FIRST else newest[..., -1]
    actor, t = int(newest[0, 0]) - 1, int(newest[0, 1]) + 256 * int(newest[0, 2])
    expected = expected_nstep(actor, t, mode) if mode_name == "nstep" else expected_sequence(actor, t, mode)
    for name, value in expected.items():
        got = sample.columns[name][i]
        if got.dtype != value.dtype or got.shape != value.shape or got.tobytes() != value.tobytes():
            raise AssertionError(f"{where} item {i} (actor {actor}, step {t}) column {name}: "
                                 f"got {got!r}, expected {value!r}")


def append_to_tables(a, actor: int, count: int, made: dict, rng) -> None:
    """Mode "tables": the stream's next `count` steps, with the items they make
    whole in apex and r2d2 and one item a step in recent, in one append."""
    first = a.steps_appended
    rows = [step(actor, i) for i in range(first, first + count)]
    steps = {name: np.array([r[name] for r in rows]) for name in ("obs", "action", "reward", "done")}
    items = {"recent": perserve.Items(list(range(first, first + count)))}
    for table, (_, mode) in TABLES.items():
        ready = item_steps(actor, first + count, made[table], mode)
        if not ready:
            continue
        columns = {"state": np.array([[actor, t, t * 2 + 1] for t in ready], np.float32)} if mode["item_columns"] else None
        items[table] = perserve.Items(ready, rng.uniform(0.1, 2.0, len(ready)), columns)
        made[table] = ready[-1] + 1
    a.append(steps, items)


def check_step(sample, i: int, where: str) -> None:
    """Mode "tables": item i of the recent table is the step itself."""
    newest = sample.columns["obs"][i]
    actor, t = int(newest[0, 0]) - 1, int(newest[0, 1]) + 256 * int(newest[0, 2])
    for name, value in step(actor, t).items():
        got = sample.columns[name][i]
        if got.tobytes() != np.asarray(value).tobytes():
            raise AssertionError(f"{where} recent item {i} (actor {actor}, step {t}) column {name}: got {got!r}")


def append_steps(a, actor: int, count: int, made: int, mode: dict, rng) -> int:
    """Appends the stream's next `count` steps with the items they make
    whole (random priorities; the item column, when the mode has one, names
    the item); returns the first stream index whose item is still to make."""
    first = a.steps_appended
    rows = [step(actor, i) for i in range(first, first + count)]
    steps = {name: np.array([r[name] for r in rows]) for name in ("obs", "action", "reward", "done")}
    ready = item_steps(actor, first + count, made, mode)
    priorities = rng.uniform(0.1, 2.0, len(ready)) if ready else None
    item_columns = ({"state": np.array([[actor, t, t * 2 + 1] for t in ready], np.float32)}
                    if mode["item_columns"] and ready else None)
    if ready and count % 2 == 0:  # the same items, as one table's of several (the server's one: "default")
        a.append(steps, {"default": perserve.Items(ready, priorities, item_columns)})
    else:
        a.append(steps, ready or None, priorities, item_columns)
    return ready[-1] + 1 if ready else made


def run_actor(actor: int, mode: dict) -> None:
    rng = np.random.default_rng(actor)
    with perserve.Actor(MPI.COMM_WORLD) as a:
        tables = mode is None
        assert a.stores_steps or tables
        peers = a.peers()
        actors = peers.Split(0, actor)
        made = {"apex": 0, "r2d2": 0} if tables else 0
        for appends in range(APPENDS_PER_ACTOR):
            if appends % 4 == 3:
                actors.Barrier()
            if tables:
                append_to_tables(a, actor, int(rng.integers(1, 9)), made, rng)
            else:
                made = append_steps(a, actor, int(rng.integers(1, 9)), made, mode, rng)
        a.flush()
        actors.Free()
        peers.Free()


def run_learner(mode: dict, mode_name: str) -> None:
    checked = 0
    # Frames first: no prefetch, so the server sends every reply from its ring (only awaited ones go so).
    with perserve.Learner(MPI.COMM_WORLD, prefetch=0 if FRAMES_FIRST else 1) as learner:
        peers = learner.peers()
        peers.Split(1, 0).Free()  # the actors' communicator is theirs alone
        peers.Free()
        names = [c.name for c in learner.schema]
        want = (["obs", "action", "return", "discount", "next_obs"] if mode_name == "nstep"
                else ["obs", "action", "reward", "done", "mask", "state"])
        assert names == want, names
        for b in range(BATCHES):
            sample = learner.sample(BATCH, beta=0.5, timeout=60.0, table="default" if b % 2 else None)
            assert sample.table == "default", sample.table
            for i in range(sample.size):
                check_item(sample, i, mode_name, mode, f"batch {b}")
                checked += 1
            assert np.all(sample.weights > 0) and np.all(sample.weights <= 1)
            learner.update_priorities(sample.keys, np.full(sample.size, 0.5 + b % 3))
        learner.flush()
    print(f"steps_job {mode_name}: {checked} sampled items equal the NumPy reference", flush=True)


def run_tables_learner(servers: int) -> None:
    """Mode "tables": each table's samples against its layout's reference;
    priorities updated in the prioritized table, refused for the others."""
    checked = {"apex": 0, "r2d2": 0, "recent": 0}
    shards_seen = {table: set() for table in checked}
    with perserve.Learner(MPI.COMM_WORLD, prefetch=1) as learner:
        peers = learner.peers()
        peers.Split(1, 0).Free()
        peers.Free()
        assert learner.tables() == ["apex", "r2d2", "recent"], learner.tables()
        assert [c.name for c in learner.schema("r2d2")][-2:] == ["mask", "state"]
        try:
            learner.update_priorities([0], [1.0], table="r2d2")
            raise AssertionError("an update of the uniform table was sent")
        except perserve.InvalidArgumentError as error:
            assert "r2d2" in str(error), error
        for b in range(BATCHES):
            table = ("apex", "r2d2", "recent")[b % 3]
            sample = learner.sample(BATCH, beta=0.5, timeout=60.0, table=table)
            assert sample.table == table, sample.table
            shards_seen[table].update(int(k) >> 54 for k in sample.keys)  # a key's top 10 bits: its shard
            for i in range(sample.size):
                if table == "recent":
                    check_step(sample, i, f"batch {b}")
                else:
                    mode_name, mode = TABLES[table]
                    check_item(sample, i, mode_name, mode, f"batch {b} table {table}")
                checked[table] += 1
            if table == "apex":
                assert np.all(sample.weights > 0) and np.all(sample.weights <= 1)
                learner.update_priorities(sample.keys, np.full(sample.size, 0.5 + b % 3), table="apex")
            else:
                assert np.all(sample.weights == 1.0), "uniform and lifo draws weigh 1"
        info = {table: learner.info(table) for table in checked}
        assert info["recent"].size <= 64 * servers, info["recent"]
        assert all(shards_seen[t] == set(range(servers)) for t in checked), shards_seen
        learner.flush()
    print(f"steps_job tables: {sum(checked.values())} sampled items ({checked}) equal the NumPy reference",
          flush=True)


def main() -> None:
    mode_name = sys.argv[1]
    servers = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    mode = MODES.get(mode_name)  # None: mode "tables"
    rank = MPI.COMM_WORLD.rank  # the servers first, then the two actors, then the learner
    if rank in (servers, servers + 1):
        run_actor(rank - servers, mode)
    elif mode is None:
        run_tables_learner(servers)
    else:
        run_learner(mode, mode_name)


if __name__ == "__main__":
    main()
