"""Ape-X DQN (Horgan et al. 2018) on perserve: N actors, one learner.

    scripts/apex-dqn.sh --actors 4 --seconds 300 --seed 0 --out runs/apex-4-0

runs, under mpirun, perserve-server (rank 0), the actors and the learner (the
last rank), all with this file (`python3 -m mpi4py apex.py`).

Actor i acts epsilon-greedily with eps_i = 0.4^(1 + 7 i / (N - 1)) from its
NumPy copy of the network, makes 3-step transitions and their initial
priorities (|TD| under that copy) and adds them 50 at a time. The learner
samples 512 (prefetching), takes a double-DQN step, sends |TD| back as
priorities, and every `--sync-every` steps broadcasts its weights over the
peers communicator (every rank but the server's). Each broadcast is an
MPI_Ibcast that actors keep posted and test once per environment step, so
neither side waits for the other; after it, an MPI_Ireduce brings the
actors' environment step counts to the learner. A stop flag in the last
broadcast ends the actors. The learner evaluates the greedy policy (20
episodes) every 2 s and stops when the mean reaches 475 or time is up.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI

import perserve
from agent import (Config, DoubleDQN, FlatWeights, NStepBuffer, act, apex_epsilon, evaluate, initial_priorities,
                   num_weights)
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
    parser.add_argument("--solved-return", type=float, default=Config.solved_return,
                        help="stop once the greedy mean return reaches this (the smoke test stops early)")
    return parser.parse_args()


class WeightSync:
    """The learner's weights to the actors and the actors' step counts back,
    over the peers communicator, without blocking either side. Round k is an
    Ibcast of [weights..., stop] from the learner, then an Ireduce (sum) of
    [env steps, episodes] to it; every peer posts the rounds in that order.
    An actor posts round k's Ireduce (with its counts then) and round k+1's
    Ibcast once round k's Ibcast has arrived."""

    def __init__(self, peers: MPI.Comm, root: int) -> None:
        self.peers, self.root = peers, root
        self.weights = np.zeros(num_weights() + 1, dtype=np.float32)  # the last element: stop
        self.totals = np.zeros(2, dtype=np.int64)
        self.env_steps = 0  # the actors' sum at the last completed round
        self.history: list[tuple[float, int]] = []  # (seconds the round was posted, env steps)
        self.requests: list[MPI.Request] = []
        self._sends: list[tuple[MPI.Request, np.ndarray]] = []  # an actor's Ireduces still in flight

    # The learner's side.
    def broadcast(self, seconds: float) -> None:
        self._zeros = np.zeros(2, dtype=np.int64)
        self.requests = [self.peers.Ibcast(self.weights, root=self.root),
                         self.peers.Ireduce(self._zeros, self.totals, op=MPI.SUM, root=self.root)]
        self._posted_at = seconds

    def round_done(self) -> bool:
        if MPI.Request.Testall(self.requests):
            self._completed()
            return True
        return False

    def wait(self) -> None:
        MPI.Request.Waitall(self.requests)
        self._completed()

    def _completed(self) -> None:
        if self.env_steps != int(self.totals[0]) or not self.history:
            self.env_steps = int(self.totals[0])
            self.history.append((self._posted_at, self.env_steps))

    def env_steps_at(self, seconds: float) -> int:
        """The actors' steps at that time, interpolated between the rounds'
        counts (each taken as the actors received the round's weights, just
        after the learner posted it)."""
        times, steps = zip(*self.history)
        return int(np.interp(seconds, times, steps))

    # An actor's side.
    def receive(self) -> None:
        self.requests = [self.peers.Ibcast(self.weights, root=self.root)]

    def arrived(self) -> bool:
        return self.requests[0].Test()

    def wait_arrived(self) -> None:
        self.requests[0].Wait()

    def report(self, steps: int, episodes: int) -> None:
        counts = np.array([steps, episodes], dtype=np.int64)  # a buffer per send: in use until it completes
        self._sends = [(r, c) for r, c in self._sends if not r.Test()]
        self._sends.append((self.peers.Ireduce(counts, None, op=MPI.SUM, root=self.root), counts))

    def finish(self) -> None:
        MPI.Request.Waitall([r for r, _ in self._sends])


def complete_round(sync: WeightSync, learner: perserve.Learner, batch_size: int, beta: float) -> None:
    """Waits for the round in flight. An actor the server's rate limiter holds
    in `add` sees no round until the learner samples again: sample (and drop)
    meanwhile."""
    while not sync.round_done():
        try:
            learner.sample(batch_size, beta=beta, timeout=1.0)
        except (perserve.FailedPreconditionError, perserve.DeadlineExceededError):
            pass  # no actor is left to add (they have all seen the round), or none was held


def run_learner(args: argparse.Namespace, comm: MPI.Comm, config: Config) -> None:
    actors = comm.size - 2
    log = RunLog(args.out, config.solved_return, agent="apex", actors=actors, seed=args.seed,
                 batch_size=args.batch_size, sync_every=args.sync_every, n_step=config.n_step,
                 samples_per_insert=args.samples_per_insert)
    dqn = DoubleDQN(config, args.seed)
    eval_weights = np.zeros(num_weights(), dtype=np.float32)
    with perserve.Learner(comm, prefetch=2) as learner:
        peers = learner.peers()
        sync = WeightSync(peers, root=peers.rank)
        dqn.flat_weights(sync.weights)
        log.restart()  # the clock starts when the actors can act
        sync.broadcast(0.0)  # round 0: the actors' first weights
        next_eval = 0.0
        solved = False
        while not solved and log.seconds() < args.seconds:
            batch = learner.sample(args.batch_size, beta=config.priority_beta, timeout=60.0)
            td = dqn.train(batch.columns, batch.weights)
            learner.update_priorities(batch.keys, td)
            if dqn.steps % args.sync_every == 0 and sync.round_done():
                dqn.flat_weights(sync.weights)
                sync.broadcast(log.seconds())
            if log.seconds() >= next_eval:
                seconds = log.seconds()
                sync.round_done()
                mean = evaluate(FlatWeights(dqn.flat_weights(eval_weights)), config.eval_episodes,
                                seed=args.seed * 1000 + len(log.evaluations))
                solved = log.record(mean, sync.env_steps, dqn.steps, seconds)
                next_eval = log.seconds() + config.eval_every_seconds
        complete_round(sync, learner, args.batch_size, config.priority_beta)
        sync.weights[-1] = 1.0  # stop
        sync.broadcast(log.seconds())
        complete_round(sync, learner, args.batch_size, config.priority_beta)
        for point in log.evaluations:  # exact counts only at rounds: interpolate between them
            point["env_steps"] = sync.env_steps_at(point["seconds"])  # log.solved_at is one of them
        updates = learner.flush()
        peers.Free()
    results = log.write(env_steps=int(sync.totals[0]), episodes=int(sync.totals[1]), learner_steps=dqn.steps,
                        priority_updates_applied=updates.applied, priority_updates_stale=updates.stale)
    print(f"learner: solved={results['solved']} seconds_to_solve={results['seconds_to_solve']} "
          f"env_steps_to_solve={results['env_steps_to_solve']} best={results['best_greedy_return']} "
          f"env_steps={results['env_steps']} learner_steps={dqn.steps}", flush=True)


def run_actor(args: argparse.Namespace, comm: MPI.Comm, config: Config) -> None:
    index, actors = comm.rank - 1, comm.size - 2
    epsilon = apex_epsilon(index, actors)
    rng = np.random.default_rng([args.seed, index])
    env = CartPole(seed=int(rng.integers(2**63)))
    nstep = NStepBuffer(config.n_step, config.gamma)
    with perserve.Actor(comm) as actor:
        peers = actor.peers()
        sync = WeightSync(peers, root=peers.size - 1)
        sync.receive()
        sync.wait_arrived()  # the first weights
        obs = env.reset()
        steps = episodes = 0
        while True:
            if sync.arrived():  # a round's weights (or the stop)
                sync.report(steps, episodes)
                if sync.weights[-1] != 0.0:
                    break
                q = FlatWeights(sync.weights[:-1].copy())
                sync.receive()
            obs, ended = act(env, q, nstep, obs, epsilon, rng)
            steps += 1
            episodes += ended
            if len(nstep) >= config.add_batch:
                columns = nstep.take()
                actor.add(columns, priorities=initial_priorities(q, columns))
        sync.finish()
        actor.flush()
        peers.Free()
    print(f"actor {index}: epsilon={epsilon:.4f} env_steps={steps} episodes={episodes}", flush=True)


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
