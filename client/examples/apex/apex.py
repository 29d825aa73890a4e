"""Ape-X DQN (Horgan et al. 2018) on perserve: N actors, one learner.

    scripts/apex-dqn.sh --actors 4 --seconds 300 --seed 0 --out runs/apex-4-0

runs, under mpirun, perserve-server (rank 0), the actors and the learner (the
last rank), all with this file (`python3 -m mpi4py apex.py`).

Actor i acts epsilon-greedily with eps_i = 0.4^(1 + 7 i / (N - 1)) from its
NumPy copy of the network and appends its steps to its stream on the server
50 at a time (`perserve-server --n-step 3`: each step is sent once, and the
server computes the 3-step transitions), creating the items those steps made
whole with their initial priorities (|3-step TD| under that copy). It does
not block: an actor the server's rate limiter holds back keeps taking weight
rounds. The learner samples 512 (prefetching), takes a double-DQN step,
sends |TD| back as priorities, and every `--sync-every` steps publishes its
weights with perserve.WeightBroadcast over the peers communicator (every rank
but the server's): rounds of MPI_Ibcast that actors poll once per
environment step, so neither side waits for the other; the last round tells
the actors to stop. The learner's samples come as torch tensors on its
device (perserve.torch.TensorSampler: views of the received message on the
CPU, pinned and copied to a GPU by its thread) and |TD| goes back as a tensor. The learner counts environment steps as the items the
replay received (Learner.info: one a step), evaluates the greedy policy (20
episodes) every 2 s and stops when the mean reaches 475 or time is up.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

import perserve
from agent import Config, DoubleDQN, FlatWeights, StepStream, act, apex_epsilon, evaluate, initial_priorities, num_weights
from cartpole import CartPole
from results import RunLog


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300.0, help="stop after this long if not solved")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="apex-run", help="results.json and curve.png go here")
    parser.add_argument("--sync-every", type=int, default=200, help="learner steps between weight broadcasts")
    parser.add_argument("--batch-size", type=int, default=Config.batch_size)
    parser.add_argument("--samples-per-insert", type=float, default=0.0,
                        help="the server's rate limiter, recorded in results.json (apex-dqn.sh sets the server's)")
    parser.add_argument("--device", default="cpu", help="the learner's torch device (cuda: its samples are pinned "
                        "and copied there by perserve.torch's sampler thread)")
    parser.add_argument("--solved-return", type=float, default=Config.solved_return,
                        help="stop once the greedy mean return reaches this (the smoke test stops early)")
    return parser.parse_args()


def run_learner(args: argparse.Namespace, comm: MPI.Comm, config: Config) -> None:
    import perserve.torch  # the learner's only: actors act with NumPy
    actors = comm.size - 2
    log = RunLog(args.out, config.solved_return, agent="apex", actors=actors, seed=args.seed,
                 batch_size=args.batch_size, sync_every=args.sync_every, n_step=config.n_step,
                 samples_per_insert=args.samples_per_insert)
    dqn = DoubleDQN(config, args.seed, device=args.device)
    flat = np.zeros(num_weights(), dtype=np.float32)
    with perserve.Learner(comm, prefetch=2) as learner:
        peers = learner.peers()
        weights = perserve.WeightBroadcast(peers, source=dqn.flat_weights(flat))  # every actor leaves with them
        log.restart()  # the clock starts when the actors can act
        next_eval, next_sync = 0.0, args.sync_every
        solved = False
        # Samples arrive as tensors on the learner's device, turned (and, for a
        # GPU, pinned and copied) by the sampler's thread while this one trains.
        with perserve.torch.TensorSampler(learner, args.batch_size, config.priority_beta, device=args.device,
                                          timeout=60.0) as sampler:
            while not solved and log.seconds() < args.seconds:
                batch = sampler.next()
                td = dqn.train(batch.columns, batch.weights)
                sampler.update_priorities(batch.keys, td)
                # A round starts once the last one has left; until then, train on.
                if dqn.steps >= next_sync and weights.publish(dqn.flat_weights(flat)):
                    next_sync = dqn.steps + args.sync_every
                if log.seconds() >= next_eval:
                    seconds = log.seconds()
                    env_steps = learner.info().items_added  # an item per environment step
                    mean = evaluate(FlatWeights(dqn.flat_weights(flat)), config.eval_episodes,
                                    seed=args.seed * 1000 + len(log.evaluations))
                    solved = log.record(mean, env_steps, dqn.steps, seconds)
                    next_eval = log.seconds() + config.eval_every_seconds
        weights.close()  # the last round tells the actors to stop
        env_steps = learner.info().items_added
        updates = learner.flush()
        peers.Free()
    results = log.write(env_steps=env_steps, learner_steps=dqn.steps, weight_rounds=weights.rounds,
                        priority_updates_applied=updates.applied, priority_updates_stale=updates.stale)
    print(f"learner: solved={results['solved']} seconds_to_solve={results['seconds_to_solve']} "
          f"env_steps_to_solve={results['env_steps_to_solve']} best={results['best_greedy_return']} "
          f"env_steps={results['env_steps']} learner_steps={dqn.steps}", flush=True)


def run_actor(args: argparse.Namespace, comm: MPI.Comm, config: Config) -> None:
    index, actors = comm.rank - 1, comm.size - 2
    epsilon = apex_epsilon(index, actors)
    rng = np.random.default_rng([args.seed, index])
    env = CartPole(seed=int(rng.integers(2**63)))
    with perserve.Actor(comm) as actor:
        if not actor.stores_steps:
            raise RuntimeError("apex.py: the server must store step streams (perserve-server --n-step 3)")
        stream = StepStream(config.n_step, config.gamma, actor.steps_appended)
        peers = actor.peers()
        weights = perserve.WeightBroadcast(peers)  # the learner's first weights
        q = FlatWeights(weights.weights)
        obs = env.reset()
        steps = episodes = held = 0
        while not weights.stopped:
            if weights.poll() is not None and not weights.stopped:  # the newest round's weights
                q = FlatWeights(weights.weights)
            obs, ended = act(env, q, stream, obs, epsilon, rng)
            steps += 1
            episodes += ended
            if len(stream) >= config.add_batch:
                columns, items, transitions = stream.take()
                priorities = initial_priorities(q, transitions)
                # The server's rate limiter may hold this actor back: wait for
                # it here, still taking weight rounds (and the stop).
                while not actor.append(columns, items=items, priorities=priorities, block=False):
                    held += 1
                    if weights.poll() is not None and not weights.stopped:
                        q = FlatWeights(weights.weights)
                    if weights.stopped:
                        break
                    time.sleep(0.001)
        weights.close()
        actor.flush()
        peers.Free()
    print(f"actor {index}: epsilon={epsilon:.4f} env_steps={steps} episodes={episodes} "
          f"rounds={weights.rounds} held={held}", flush=True)


def main() -> int:
    args = parse_args()
    comm = MPI.COMM_WORLD
    config = Config(batch_size=args.batch_size, solved_return=args.solved_return)
    if comm.size < 3:
        print("apex.py: needs the server, at least one actor and the learner", file=sys.stderr)
        return 2
    if comm.rank == comm.size - 1:
        run_learner(args, comm, config)
    else:
        run_actor(args, comm, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
