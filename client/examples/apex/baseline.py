"""The baseline for Ape-X: the same double-DQN learner (agent.DoubleDQN, batch
512, the same hyperparameters) with an in-process prioritized replay
(replay.PrioritizedReplay) and one environment loop, no MPI, one process.

    scripts/apex-baseline.sh --seconds 300 --seed 0 --out runs/baseline-0

The loop steps the environment epsilon-greedily (epsilon from 1 down to 0.01
over the first 10,000 steps, as single-stream DQN does; --epsilon fixes it),
and every --env-steps-per-update steps adds the new 3-step transitions with
their |TD| under the current network as priorities and takes one learner
step. Evaluated and stopped as apex.py is: 20 greedy episodes every 2 s,
solved at a mean of 475.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from agent import Config, DoubleDQN, FlatWeights, NStepBuffer, act, evaluate, num_weights
from cartpole import OBS_SIZE, CartPole
from replay import PrioritizedReplay
from results import RunLog


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300.0, help="stop after this long if not solved")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="baseline-run", help="results.json and curve.png go here")
    parser.add_argument("--batch-size", type=int, default=Config.batch_size)
    parser.add_argument("--env-steps-per-update", type=int, default=4,
                        help="environment steps between learner steps (DQN's 4)")
    parser.add_argument("--epsilon", type=float, default=None, help="a fixed epsilon instead of the decay")
    parser.add_argument("--epsilon-decay-steps", type=int, default=10_000)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    config = Config(batch_size=args.batch_size)
    log = RunLog(args.out, config.solved_return, agent="baseline", actors=1, seed=args.seed,
                 batch_size=args.batch_size, env_steps_per_update=args.env_steps_per_update, n_step=config.n_step)
    dqn = DoubleDQN(config, args.seed)
    replay = PrioritizedReplay(config.capacity, {"obs": (np.float32, (OBS_SIZE,)), "action": (np.int64, ()),
                                                 "return": (np.float32, ()), "next_obs": (np.float32, (OBS_SIZE,)),
                                                 "discount": (np.float32, ())},
                               config.priority_alpha, config.priority_eps, args.seed)
    rng = np.random.default_rng([args.seed, 0])
    env = CartPole(seed=int(rng.integers(2**63)))
    nstep = NStepBuffer(config.n_step, config.gamma)
    weights = np.zeros(num_weights(), dtype=np.float32)
    q = FlatWeights(dqn.flat_weights(weights))  # acting with NumPy, as an actor does
    obs = env.reset()
    steps = episodes = 0
    next_eval = 0.0
    solved = False
    log.restart()
    while not solved and log.seconds() < args.seconds:
        if args.epsilon is not None:
            epsilon = args.epsilon
        else:
            epsilon = max(0.01, 1.0 - 0.99 * steps / args.epsilon_decay_steps)
        obs, ended = act(env, q, nstep, obs, epsilon, rng)
        steps += 1
        episodes += ended
        if steps % args.env_steps_per_update == 0:
            if len(nstep):
                columns = nstep.take()
                replay.add(columns, dqn.td_errors(columns))
            if replay.size >= config.min_size_to_sample:
                slots, is_weights, columns = replay.sample(args.batch_size, config.priority_beta)
                replay.update(slots, dqn.train(columns, is_weights).numpy().astype(np.float64))
                dqn.flat_weights(weights)  # q views these
        if log.seconds() >= next_eval:
            seconds = log.seconds()
            solved = log.record(evaluate(q, config.eval_episodes, seed=args.seed * 1000 + len(log.evaluations)),
                                steps, dqn.steps, seconds)
            next_eval = log.seconds() + config.eval_every_seconds
    results = log.write(env_steps=steps, episodes=episodes, learner_steps=dqn.steps)
    print(f"baseline: solved={results['solved']} seconds_to_solve={results['seconds_to_solve']} "
          f"env_steps_to_solve={results['env_steps_to_solve']} best={results['best_greedy_return']} "
          f"env_steps={steps} learner_steps={dqn.steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
