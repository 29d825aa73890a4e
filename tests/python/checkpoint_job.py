"""Clients for the checkpoint jobs (tests/mpi/checkpoint_jobs.py drives them):
the last rank learns, the others but the servers act.

    checkpoint_job.py write SERVERS   actors add ITEMS items each (ids: actor * 10**6 + j),
                                      the learner asks for a checkpoint and checks its paths
    checkpoint_job.py read SERVERS N  (after --restore) the learner finds N items ever added,
                                      samples only ids that were written; actors add one more batch
    checkpoint_job.py term SERVERS    actors add and the learner samples until the server,
                                      sent SIGTERM, answers UNAVAILABLE (or the job is killed);
                                      each actor prints the items the server acknowledged
Columns besides id (the crash job's large one) are zeros.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

import perserve

ITEMS = 3000
mode, servers = sys.argv[1], int(sys.argv[2])
comm = MPI.COMM_WORLD
learner_rank = comm.size - 1
actors = comm.size - servers - 1

if comm.rank == learner_rank:
    with perserve.Learner(comm, prefetch=0) as learner:
        peers = learner.peers()
        assert learner.shards == servers
        if mode == "write":
            peers.Barrier()  # every item is in
            paths = learner.checkpoint()
            assert len(paths) == servers and all(os.path.exists(os.path.join(p, "MANIFEST")) for p in paths), paths
            info = learner.info()
            assert info.items_added == actors * ITEMS, info
            print(f"learner: checkpoints {paths}; {info.items_added} items", flush=True)
        elif mode == "read":
            expected = int(sys.argv[3])
            info = learner.info()
            # Every item held is drawable: an add whose columns' receive was given
            # up at SIGTERM (perserve-launch's clients outlive the stop) changed
            # nothing, its columns having gone to the ring's free slots.
            assert info.items_added == expected and info.size <= expected, info
            for _ in range(20):
                batch = learner.sample(256, beta=0.4, timeout=30.0)
                ids = batch.columns["id"]
                assert np.all(ids % 10**6 < ITEMS) and np.all(ids // 10**6 < actors), ids
                assert np.all(batch.weights <= 1.0)
            peers.Barrier()  # the actors add one more batch each
            peers.Barrier()
            assert learner.info().items_added == expected + 100 * actors
            print(f"learner: restored {info.items_added} items, sampled written ids only", flush=True)
        elif mode == "term":
            try:
                while True:
                    batch = learner.sample(64, beta=0.4, timeout=30.0)
                    learner.update_priorities(batch.keys, np.ones(64))
            except perserve.UnavailableError as stopped:
                print(f"learner: {stopped.message}", flush=True)
            try:  # updates still in flight were refused too
                learner.close()
            except perserve.UnavailableError as rest:
                print(f"learner: at close: {rest.message}", flush=True)
        peers.Free() if mode != "term" else None
else:
    index = comm.rank - servers
    with perserve.Actor(comm) as actor:
        peers = actor.peers()
        ids = index * 10**6 + np.arange(ITEMS)
        zeros = {c.name: np.zeros((100,) + c.shape, c.dtype) for c in actor.schema if c.name != "id"}
        if mode == "write":
            for start in range(0, ITEMS, 100):
                chunk = ids[start:start + 100]
                actor.add({"id": chunk}, priorities=1.0 + (chunk % 7))
            actor.flush()
            peers.Barrier()
        elif mode == "read":
            peers.Barrier()
            actor.add({"id": ids[:100], **zeros})
            actor.flush()
            peers.Barrier()
        elif mode == "term":
            try:
                while True:
                    actor.add({"id": ids[:100], **zeros})
            except perserve.UnavailableError as stopped:
                print(f"actor {index}: {stopped.message}", flush=True)
            try:  # the batches still in flight were refused too: close says so
                actor.close()
            except perserve.UnavailableError as rest:
                print(f"actor {index}: at close: {rest.message}", flush=True)
            print(f"actor {index}: {actor.items_acknowledged} items acknowledged", flush=True)
        peers.Free() if mode != "term" else None
