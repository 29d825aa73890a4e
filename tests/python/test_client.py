"""The perserve Python package end to end (see conftest.py for the set-up)."""
import contextlib
import math
import os
import sys
import threading
import time

import numpy as np
import pytest

import perserve
from conftest import SCHEMA, expected

N_ITEMS = 300


def batch(ids):
    return {name: expected(name, ids) for name, _, _ in SCHEMA}


@contextlib.contextmanager
def ends_job_if_still_waiting(seconds, what, pytestconfig):
    """Ends this rank (exit status 3, so mpirun ends the job) if the block
    still runs after `seconds`, saying why past pytest's capture."""
    def expire():
        with pytestconfig.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            print(f"[rank 2] {what} after {seconds} s: does the server honour timeouts?", file=sys.stderr,
                  flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_schema_names_dtypes_and_shapes(client):
    assert [(c.name, c.dtype, c.shape) for c in client.schema] == SCHEMA
    assert all(isinstance(c.dtype, np.dtype) for c in client.schema)
    assert "i64:int64:2,2" in repr(client)


def test_sample_timeout_raises_deadline_exceeded(client, role, pytestconfig):
    # Runs before anything is added: the replay is empty, below its minimum
    # size (1), so the server defers every sample until its timeout.
    if role == "actor":
        for bad in (0, -1.0, math.nan):
            with pytest.raises(perserve.InvalidArgumentError, match="timeout must be None or > 0"):
                perserve.Actor(add_timeout=bad)  # refused before the (collective) join
        return
    for bad in (0, -1.0, math.nan):
        with pytest.raises(perserve.InvalidArgumentError, match="timeout must be None or > 0"):
            client.sample(8, 0.4, timeout=bad)
    # A server that ignored the timeout would leave this rank waiting: the
    # job ends instead after 20 s.
    with ends_job_if_still_waiting(20, "no DeadlineExceededError for a sample with a timeout", pytestconfig):
        started = time.monotonic()
        with pytest.raises(perserve.DeadlineExceededError) as raised:
            client.sample(8, 0.4, timeout=0.5)
        waited = time.monotonic() - started
        assert raised.value.code == 9
        assert 0.4 <= waited <= 5.0, waited
        assert client.samples_in_flight == 0  # nothing prefetched for a call that failed
        client.request_sample(4, 0.4, timeout=0.3)
        with pytest.raises(perserve.DeadlineExceededError):
            client.receive_sample()
        assert client.samples_in_flight == 0


def test_every_dtype_and_shape_round_trips(client, role, peers):
    if role == "actor":
        for start in range(0, N_ITEMS, 50):
            ids = np.arange(start, start + 50, dtype=np.int64)
            client.add(batch(ids), priorities=1.0 + ids % 5)  # unequal leaves: weights tell from probabilities
        client.add(batch(np.array([N_ITEMS], dtype=np.int64)))  # one item, no priorities
        client.flush()
        assert client.items_acknowledged == N_ITEMS + 1
    peers.Barrier()  # the learner samples once everything is in
    if role == "learner":
        sample = client.sample(64, 0.4, timeout=30.0)  # the learner stays usable after a timeout
        assert len(sample) == 64
        assert sample.keys.dtype == np.uint64 and sample.keys.shape == (64,)
        assert sample.weights.dtype == np.float64 and np.all((sample.weights > 0) & (sample.weights <= 1))
        assert np.all(sample.probabilities > 0)
        # The formula, w_i = (P_i / P_min)^-beta: w_i P_i^beta is one number
        # for every item (weights and probabilities swapped, it is not).
        scaled = sample.weights * sample.probabilities ** 0.4
        assert np.allclose(scaled, scaled[0], rtol=1e-12, atol=0), (sample.weights, sample.probabilities)
        assert len(np.unique(sample.weights)) > 1
        ids = sample.columns["id"]
        assert np.array_equal(ids.astype(np.uint64), sample.keys)  # one actor: keys are ids
        for name, dtype, shape in SCHEMA:
            column = sample.columns[name]
            assert column.dtype == dtype and column.shape == (64,) + shape, name
            assert np.array_equal(column, expected(name, ids)), name


@pytest.mark.parametrize("case", ["dtype", "shape", "items", "missing", "unknown", "list"])
def test_wrong_column_is_rejected_naming_it(client, role, case):
    if role != "actor":
        return
    columns = batch(np.arange(4, dtype=np.int64))
    if case == "dtype":
        columns["f32"] = columns["f32"].astype(np.float64)
        message = 'column "f32": expected dtype float32, given float64'
    elif case == "shape":
        columns["i64"] = columns["i64"].reshape(4, 4)
        message = 'column "i64": expected shape (n, 2, 2), given (4, 4)'
    elif case == "items":
        columns["u8"] = columns["u8"][:3]
        message = 'column "u8" has 3 items, column "id" 4'
    elif case == "missing":
        del columns["f64"]
        message = 'column "f64" is missing: expected float64 items of shape (1,)'
    elif case == "unknown":
        columns["reward"] = np.zeros(4, np.float32)
        message = 'column "reward" is not in the schema'
    else:
        columns["i32"] = [[1, 2]] * 4  # a list takes the column's dtype, but not another shape
        message = 'column "i32": expected shape (n,), given (4, 2)'
    before = client.items_acknowledged
    with pytest.raises(perserve.InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        client.add(columns)
    client.flush()
    assert client.items_acknowledged == before  # nothing was sent


def test_bad_priorities_are_refused_at_their_own_add(client, role):
    if role != "actor":
        return
    columns = batch(np.arange(3, dtype=np.int64))
    with pytest.raises(perserve.InvalidArgumentError, match="priority nan at position 1 must be finite and >= 0"):
        client.add(columns, priorities=[1.0, np.nan, 1.0])
    with pytest.raises(perserve.InvalidArgumentError, match="priority -1 at position 0"):
        client.add(columns, priorities=-np.ones(3))
    with pytest.raises(perserve.InvalidArgumentError, match="2 priorities for 3 items"):
        client.add(columns, priorities=[1.0, 1.0])
    client.flush()  # no later batch is lost with them


def test_sample_arrays_view_the_received_message(client, role):
    if role != "learner":
        return
    sample = client.sample(64, 0.4)
    start = sample.message.__array_interface__["data"][0]
    for name, column in sample.columns.items():
        assert not column.flags.owndata, name
        assert np.shares_memory(column, sample.message), name
        offset = column.__array_interface__["data"][0] - start
        assert 0 < offset and offset + column.nbytes <= sample.message.nbytes, name
        assert sample.message[offset:offset + column.nbytes].tobytes() == column.tobytes(), name
    del sample.message  # the arrays keep the message alive
    column = sample.columns["f32"]
    assert np.array_equal(column, expected("f32", sample.columns["id"]))


def test_a_released_sample_lends_its_buffer_to_a_later_one(client, role):
    # Once no array of a sample is left, its message's buffer goes back to
    # the learner, which receives a later sample into it; not before.
    if role != "learner":
        return
    handle, most = client._handle, 3
    first = client.sample(64, 0.4)
    ids, f32 = first.columns["id"], first.columns["f32"]
    pooled = handle.pooled_messages()
    del first
    assert handle.pooled_messages() == pooled  # the arrays still view the message
    assert np.array_equal(f32, expected("f32", ids))
    del ids, f32
    assert handle.pooled_messages() == min(pooled + 1, most)
    second = client.sample(64, 0.4)
    assert handle.pooled_messages() == min(pooled + 1, most) - 1
    assert np.array_equal(second.columns["f32"], expected("f32", second.columns["id"]))


def test_prefetch_keeps_requests_in_flight_in_order(client, role):
    if role != "learner":
        return
    client.sample(16, 0.4)
    assert client.samples_in_flight == 2
    assert len(client.sample(16, 0.4)) == 16 and client.samples_in_flight == 2
    assert len(client.sample(9, 0.4)) == 9 and client.samples_in_flight == 2  # older sizes dropped
    client.receive_sample()
    client.receive_sample()
    assert client.samples_in_flight == 0
    client.request_sample(3, 0.4)
    client.request_sample(5, 0.4)
    with pytest.raises(perserve.FailedPreconditionError):
        client.request_sample(7, 0.4)
    assert [len(client.receive_sample()) for _ in range(2)] == [3, 5]


def test_priority_updates_do_not_wait_and_errors_raise_later(client, role):
    if role != "learner":
        return
    sample = client.sample(32, 0.4)
    applied_before = client.flush().applied
    for i in range(10):
        assert client.update_priorities(sample.keys, np.full(32, 1.0 + i)) is None
    applied, stale, dropped = client.flush()
    assert applied - applied_before == 320 and stale == 0 and dropped == 0
    result = client.update_priorities(sample.keys[:4], np.full(4, 2.0), wait=True)
    assert isinstance(result, perserve.UpdateResult) and result == (4, 0, 0)
    assert client.flush().applied == applied + 4
    with pytest.raises(perserve.InvalidArgumentError, match="priority -1 at position 0"):  # the server's policy
        client.update_priorities(sample.keys[:1], [-1.0], wait=True)
    client.update_priorities(np.array([1 << 40], dtype=np.uint64), [1.0])  # never issued: the server says so
    with pytest.raises(perserve.NotFoundError) as raised:
        client.flush()
    assert raised.value.code == 6 and "was never issued" in raised.value.message
    client.flush()  # reported once


def test_update_rejection_raises_from_the_sample_requested_after_it(client, role):
    # The server answers one client in order, so the reply to a sample
    # requested after an update comes after the update's answer: receiving
    # it must raise the update's rejection (before, it returned the sample
    # and the rejection waited for a later call).
    if role != "learner":
        return
    while client.samples_in_flight:
        client.receive_sample()
    for _ in range(5):  # each time, whenever the server's answer arrives
        client.update_priorities(np.array([1 << 40], dtype=np.uint64), [1.0])  # never issued
        client.request_sample(8, 0.4)
        with pytest.raises(perserve.NotFoundError, match="an earlier priority update was rejected"):
            client.receive_sample()
        # Raised after receiving the reply (that sample is dropped with the
        # error) or, when the answer had come before the call, at its start
        # (the call does nothing else, client.h): the sample is still in flight.
        if client.samples_in_flight:
            assert len(client.receive_sample()) == 8
        assert client.samples_in_flight == 0
    assert len(client.sample(8, 0.4)) == 8  # and the learner goes on


def test_errors_are_typed_exceptions(client, role):
    if role != "learner":
        return
    with pytest.raises(perserve.InvalidArgumentError) as raised:
        client.sample(0, 0.4)
    assert isinstance(raised.value, perserve.Error) and raised.value.code == 1
    assert "batch size 0" in raised.value.message
    assert client.samples_in_flight == 0
    assert len(client.sample(8, 0.4)) == 8  # and the learner goes on


def test_gil_is_released_while_waiting(client, role):
    # The learner waits in a collective (peers) that the actor joins 0.5 s
    # late; a thread keeps counting meanwhile only if the wait released the GIL.
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    if role == "actor":
        time.sleep(0.5)
        client.peers().Free()
        return
    thread = threading.Thread(target=count)
    thread.start()
    time.sleep(0.05)
    try:
        before = len(ticks)
        started = time.monotonic()
        comm = client.peers()
        waited = time.monotonic() - started
        during = len(ticks) - before
    finally:
        stop.set()
        thread.join()
    comm.Free()
    assert waited > 0.2, waited
    assert during >= 20, f"{during} ticks in {waited:.2f} s"


def test_peers_broadcast_weights_without_the_server(client, role):
    comm = client.peers()
    try:
        assert comm.size == 2
        weights = np.arange(1000, dtype=np.float32) if role == "learner" else np.zeros(1000, np.float32)
        comm.Bcast(weights, root=1)  # the learner is rank 1 of the peers
        assert np.array_equal(weights, np.arange(1000, dtype=np.float32))
    finally:
        comm.Free()


def test_weight_broadcast_rounds_never_block_and_end_with_stop(client, role, peers):
    source = np.arange(500, dtype=np.float32) if role == "learner" else None
    weights = perserve.WeightBroadcast(peers, source=source)
    assert np.array_equal(weights.weights, np.arange(500, dtype=np.float32))  # the first, to everyone
    assert weights.is_source == (role == "learner")
    if role == "learner":
        sent = 0
        for k in range(1, 200):
            sent += weights.publish(np.full(500, k, dtype=np.float32))  # False while a round travels
        assert sent >= 1
        peers.Barrier()  # the actor polls only now: rounds wait for it, the learner did not
        weights.close()
        assert weights.stopped
        with pytest.raises(RuntimeError, match="closed"):
            weights.publish(np.zeros(500, np.float32))
        peers.send(sent, dest=0)
    else:
        peers.Barrier()
        newest = weights.wait()                 # at least the first round
        while not weights.stopped:
            newest = weights.wait()
        sent = peers.recv(source=1)
        assert weights.rounds == sent + 1       # every published round, then the stop
        assert newest[0] == newest[-1] and newest[0] >= 1  # a round is whole: one k throughout
        assert weights.poll() is None
        with pytest.raises(RuntimeError, match="only the peer that passed source weights"):
            weights.publish(np.zeros(500, np.float32))


def test_info_counts_the_replay_and_add_need_not_block(client, role, peers):
    if role == "actor":
        client.flush()
    peers.Barrier()  # every earlier add is stored
    if role == "learner":
        before = client.info()
        assert isinstance(before, perserve.ReplayInfo)
        assert before.shards == 1 and before.shards_ready == 1
        assert before.items_added >= N_ITEMS and 0 < before.size <= before.items_added and before.total > 0
    peers.Barrier()
    if role == "actor":
        # Nothing in flight: sent at once. (Held back by a rate limiter, it
        # would return False and send nothing: test_rate_limited_add below.)
        assert client.add(batch(np.arange(20)), block=False) is True
        client.flush()
    peers.Barrier()
    if role == "learner":
        assert client.info().items_added == before.items_added + 20
        # This server runs without --checkpoint-dir (tests/mpi/checkpoint_jobs.py writes them).
        with pytest.raises(perserve.FailedPreconditionError, match="--checkpoint-dir"):
            client.checkpoint()


def test_the_default_table_by_name_and_unknown_tables(client, role, peers):
    # This server has one table, "default": named, it is what every call
    # without a table means; another name is refused before anything is sent.
    assert client.tables() == ["default"]
    unknown = 'no table "r2d2": the server\'s tables are "default"; nothing was sent'
    if role == "actor":
        assert client.add(batch(np.arange(400, 410)), table="default") is True
        client.flush()
        with pytest.raises(perserve.InvalidArgumentError, match=unknown):
            client.add(batch(np.arange(10)), table="r2d2")
        with pytest.raises(perserve.InvalidArgumentError, match=unknown):
            client.append(items={"r2d2": perserve.Items([0])})
        with pytest.raises(perserve.InvalidArgumentError, match="carry their own priorities"):
            client.append(items={"default": [0]}, priorities=[1.0])
        assert client.item_schema("default") == [] and client.item_schema() == []
    peers.Barrier()
    if role == "learner":
        while client.samples_in_flight:
            client.receive_sample()
        assert client.schema("default") == list(client.schema) and client.schema() == list(client.schema)
        sample = client.sample(8, 0.4, table="default")
        assert sample.table == "default" and len(sample) == 8
        assert client.sample(8, 0.4).table == "default"  # the prefetched ones: the same table
        assert client.update_priorities(sample.keys, np.full(8, 2.0), wait=True, table="default") == (8, 0, 0)
        assert client.info(table="default") == client.info()
        while client.samples_in_flight:
            assert client.receive_sample().table == "default"
        client.request_sample(4, 0.4, table="default")
        assert len(client.receive_sample()) == 4
        for call in (lambda: client.sample(8, 0.4, table="r2d2"), lambda: client.request_sample(8, 0.4, table="r2d2"),
                     lambda: client.info(table="r2d2"), lambda: client.schema("r2d2"),
                     lambda: client.update_priorities(sample.keys, np.ones(8), table="r2d2")):
            with pytest.raises(perserve.InvalidArgumentError, match=unknown):
                call()
        assert client.samples_in_flight == 0


def test_close_is_idempotent_and_final(client, role):
    client.close()
    client.close()
    assert client.closed
    with pytest.raises(perserve.FailedPreconditionError):
        client.flush()
