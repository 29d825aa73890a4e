"""A sample as torch tensors against as NumPy arrays: what perserve.torch
costs per batch (issue 37). Run under perserve-launch beside a server of
the schema SCHEMA names (bench/python/torch_sample.sh does it):

    perserve-launch -n 1 perserve-server --column ... : -n 2 torch_sample.py SCHEMA OUT.json

Rank 1 fills the replay and waits; rank 2, the learner, times in turn, for
each batch size, ROUNDS rounds of STEPS samples each (medians of the rounds):
  numpy      learner.sample(B, beta)                        the arrays alone
  as_tensors perserve.torch.as_tensors(learner.sample(...)) tensors that view them
  convert    as_tensors(sample) alone, on a sample in hand  the conversion's own cost
  sampler    TensorSampler(learner, B, beta).next()         the thread's batches
and writes the medians (microseconds a batch) and their ratios to OUT.json.
"""
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import perserve
import perserve.torch as ptorch

SCHEMAS = {
    "cartpole": {"obs": (np.float32, (4,)), "action": (np.int64, ()), "reward": (np.float32, ()),
                 "next_obs": (np.float32, (4,)), "done": (np.uint8, ())},
    "atari": {"obs": (np.uint8, (84, 84, 4)), "action": (np.int64, ()), "reward": (np.float32, ()),
              "next_obs": (np.uint8, (84, 84, 4)), "done": (np.uint8, ())},
}
FILL = 20000
BATCHES = (64, 512)
ROUNDS, STEPS = 5, 200


def timed(step, steps):
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps * 1e6


def measure(learner, batch, steps):
    results = {}
    rounds = {"numpy": [], "as_tensors": [], "convert": [], "sampler": []}
    in_hand = learner.sample(batch, 0.4)
    for _ in range(ROUNDS):  # interleaved, so a slow spell of the machine hits every mode
        rounds["numpy"].append(timed(lambda: learner.sample(batch, 0.4), steps))
        rounds["as_tensors"].append(timed(lambda: ptorch.as_tensors(learner.sample(batch, 0.4)), steps))
        rounds["convert"].append(timed(lambda: ptorch.as_tensors(in_hand), steps))
        with ptorch.TensorSampler(learner, batch, 0.4) as sampler:
            sampler.next()  # the thread started
            rounds["sampler"].append(timed(sampler.next, steps))
    for mode, values in rounds.items():
        results[f"{mode}_us"] = statistics.median(values)
    results["as_tensors_over_numpy"] = results["as_tensors_us"] / results["numpy_us"]
    results["sampler_over_numpy"] = results["sampler_us"] / results["numpy_us"]
    return results


def main():
    schema_name, out = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    if comm.rank == 1:
        with perserve.Actor(comm) as actor:
            peers = actor.peers()
            columns = {name: np.zeros((100,) + shape, dtype) for name, (dtype, shape) in SCHEMAS[schema_name].items()}
            for _ in range(FILL // 100):
                actor.add(columns)
            actor.flush()
            peers.Barrier()  # filled
            peers.Barrier()  # measured
            peers.Free()
        return
    with perserve.Learner(comm, prefetch=2) as learner:
        peers = learner.peers()
        peers.Barrier()
        report = {"schema": schema_name, "item_bytes": sum(c.item_bytes for c in learner.schema),
                  "rounds": ROUNDS, "steps": STEPS, "batches": {}}
        for batch in BATCHES:
            steps = STEPS if schema_name == "cartpole" else STEPS // 4
            report["batches"][str(batch)] = measure(learner, batch, steps)
            print(f"{schema_name} batch {batch}: {json.dumps(report['batches'][str(batch)])}", flush=True)
        peers.Barrier()
        peers.Free()
    with open(out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
