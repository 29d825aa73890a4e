"""Fixtures for the Python client tests, run under mpirun beside a real
perserve-server (tests/CMakeLists.txt, python_client): world rank 1 is the
actor, rank 2 the learner; both run the same tests in the same order, each
doing its side, with a barrier over the peers communicator after every test
so a failure on one side cannot leave the other waiting."""
import numpy as np
import pytest
from mpi4py import MPI

import perserve

# The server's --column flags, as the tests expect to read them back.
SCHEMA = [
    ("id", np.dtype(np.int64), ()),
    ("u8", np.dtype(np.uint8), (3,)),
    ("i32", np.dtype(np.int32), ()),
    ("i64", np.dtype(np.int64), (2, 2)),
    ("f32", np.dtype(np.float32), (4,)),
    ("f64", np.dtype(np.float64), (1,)),
]


def expected(name, ids):
    """Every column's value for items `ids`: a function of the id."""
    if name == "id":
        return ids.astype(np.int64)
    dtype, shape = {n: (d, s) for n, d, s in SCHEMA}[name]
    count = int(np.prod(shape, dtype=np.int64))
    values = ids.astype(np.float64)[:, None] * 7 + np.arange(count)[None, :]
    if dtype.kind == "f":
        values = values + 0.25
    else:
        values = values % (256 if dtype == np.uint8 else 1 << 30)
    return values.astype(dtype).reshape((len(ids),) + shape)


@pytest.fixture(scope="session")
def role():
    return {1: "actor", 2: "learner"}[MPI.COMM_WORLD.rank]


@pytest.fixture(scope="session")
def client(role):
    # The join is collective over the world: both ranks make theirs here.
    # The actor's adds carry a timeout: no rate limiter holds them back here,
    # so it must change nothing.
    made = (perserve.Actor(MPI.COMM_WORLD, add_timeout=30.0) if role == "actor"
            else perserve.Learner(MPI.COMM_WORLD, prefetch=2))
    yield made
    made.close()


@pytest.fixture(scope="session")
def peers(client):
    comm = client.peers()
    yield comm
    comm.Free()


@pytest.fixture(autouse=True)
def lockstep(peers):
    yield
    peers.Barrier()
