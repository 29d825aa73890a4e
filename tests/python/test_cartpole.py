"""The Ape-X example's NumPy CartPole-v1 (client/examples/apex/cartpole.py)
against values worked out by hand from the equations, and the pieces of the
agent with hand-checkable answers: n-step transitions, Ape-X's epsilons and
the baseline's prioritized replay. No MPI: run with --noconftest (the
conftest beside this file joins a perserve job)."""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "examples", "apex"))

from agent import NStepBuffer, StepStream, apex_epsilon  # noqa: E402
from cartpole import MAX_STEPS, THETA_LIMIT, CartPole, CartPoleBatch, dynamics  # noqa: E402
from replay import PrioritizedReplay  # noqa: E402


def test_two_pushes_right_from_rest_match_the_hand_computed_state():
    # From rest, cos = 1 and sin = 0, so with F = 10:
    #   temp      = F / (m_c + m_p)                        = 100/11
    #   theta_acc = -temp / (l (4/3 - m_p / (m_c + m_p))) = -(100/11) / (41/66) = -600/41
    #   x_acc     = temp - m_p l theta_acc / (m_c + m_p)   = 100/11 + 300/451  = 4400/451
    # Euler with tau = 0.02: positions move with the old velocities.
    env = CartPole(seed=0)
    env.reset()
    env.state = (0.0, 0.0, 0.0, 0.0)
    obs, reward, terminated, truncated = env.step(1)
    assert env.state == pytest.approx((0.0, 0.02 * 4400 / 451, 0.0, -0.02 * 600 / 41), abs=1e-12)
    assert obs.dtype == np.float32 and obs.shape == (4,)
    assert (reward, terminated, truncated) == (1.0, False, False)
    # theta is still 0 at the second step's start: the same accelerations again.
    env.step(1)
    assert env.state == pytest.approx((0.02 * 88 / 451, 2 * 88 / 451, -0.02 * 12 / 41, -2 * 12 / 41), abs=1e-12)


def test_a_push_left_mirrors_a_push_right():
    right = dynamics(0.01, 0.1, 0.02, -0.1, 10.0, math.cos, math.sin)
    left = dynamics(-0.01, -0.1, -0.02, 0.1, -10.0, math.cos, math.sin)
    assert left == pytest.approx(tuple(-v for v in right), abs=1e-15)


def test_gravity_pulls_a_leaning_pole_further_over():
    # No net force on the cart (F = 0 is not an action, but dynamics takes it):
    # theta_acc = g sin(theta) / (l (4/3 - m_p cos^2 / (m_c + m_p))) > 0 for theta > 0.
    theta = 0.1
    _, _, _, theta_dot = dynamics(0.0, 0.0, theta, 0.0, 0.0, math.cos, math.sin)
    expected = 9.8 * math.sin(theta) / (0.5 * (4 / 3 - 0.1 * math.cos(theta) ** 2 / 1.1))
    assert theta_dot == pytest.approx(0.02 * expected, rel=1e-12)


def test_the_episode_terminates_past_12_degrees_and_pays_that_step():
    env = CartPole(seed=0)
    env.reset()
    env.state = (0.0, 0.0, THETA_LIMIT - 1e-4, 1.0)  # theta passes the limit within this step
    _, reward, terminated, truncated = env.step(1)
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_the_episode_is_truncated_after_500_steps():
    env = CartPole(seed=0)
    env.reset()
    for _ in range(MAX_STEPS - 1):
        env.state = (0.0, 0.0, 0.0, 0.0)  # held upright
        assert env.step(0)[2:] == (False, False)
    env.state = (0.0, 0.0, 0.0, 0.0)
    assert env.step(0)[2:] == (False, True)


def test_reset_draws_each_state_variable_in_plus_minus_0_05():
    env = CartPole(seed=3)
    states = np.array([env.reset() for _ in range(200)])
    assert states.shape == (200, 4) and np.abs(states).max() <= 0.05 and np.abs(states).max() > 0.04


def test_the_batch_steps_as_the_single_environment_does_and_counts_returns():
    batch = CartPoleBatch(3, seed=1)
    batch.reset()
    singles = []
    for i in range(3):
        env = CartPole()
        env.state = tuple(batch.state[:, i])
        singles.append(env)
    returns = np.zeros(3)
    for step in range(60):
        actions = np.array([step % 2, 1, 0])  # 1 and 0: pushed one way, it falls within 60 steps
        running = ~batch.done
        obs = batch.step(actions)
        for i, env in enumerate(singles):
            if running[i]:
                single_obs, reward, terminated, truncated = env.step(int(actions[i]))
                returns[i] += reward
                np.testing.assert_allclose(obs[i], single_obs, rtol=1e-6)
                assert batch.done[i] == (terminated or truncated)
    assert batch.done[1] and batch.done[2] and returns[1] < 60 and returns[2] < 60
    np.testing.assert_array_equal(batch.returns, returns)


def test_n_step_returns_bootstrap_except_where_the_episode_terminated():
    gamma = 0.5
    buffer = NStepBuffer(3, gamma)
    obs = [np.full(4, i, dtype=np.float32) for i in range(6)]
    for t in range(4):  # four steps, rewards 1, 2, 3, 4; then terminated
        buffer.step(obs[t], t % 2, float(t + 1), obs[t + 1], terminated=(t == 3), truncated=False)
    out = buffer.take()
    assert len(buffer) == 0
    np.testing.assert_allclose(out["return"], [1 + 2 * 0.5 + 3 * 0.25, 2 + 3 * 0.5 + 4 * 0.25, 3 + 4 * 0.5, 4])
    np.testing.assert_array_equal(out["discount"], [0.125, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [3, 4, 4, 4])
    np.testing.assert_array_equal(out["action"], [0, 1, 0, 1])
    assert out["obs"].dtype == np.float32 and out["action"].dtype == np.int64


def test_a_truncated_episode_still_bootstraps():
    buffer = NStepBuffer(3, 0.5)
    buffer.step(np.zeros(4), 0, 1.0, np.ones(4), terminated=False, truncated=False)
    buffer.step(np.ones(4), 0, 1.0, np.full(4, 2.0), terminated=False, truncated=True)
    np.testing.assert_array_equal(buffer.take()["discount"], [0.25, 0.5])


def test_a_step_stream_sends_each_step_once_and_makes_items_once_whole():
    stream = StepStream(3, 0.5, first_index=10)
    obs = [np.full(4, i, dtype=np.float32) for i in range(9)]
    # An episode of 4 steps that terminates, then one of 3 cut off by the step limit.
    for t in range(4):
        stream.step(obs[t], t % 2, float(t + 1), obs[t + 1], terminated=(t == 3), truncated=False)
    steps, items, transitions = stream.take()
    np.testing.assert_array_equal(steps["done"], [0, 0, 0, 1])
    np.testing.assert_array_equal(items, [10, 11, 12, 13])  # all whole: the episode ended
    np.testing.assert_array_equal(transitions["discount"], [0.125, 0.0, 0.0, 0.0])
    for t in range(5, 8):
        stream.step(obs[t], 1, 1.0, obs[t + 1], terminated=False, truncated=(t == 7))
        if t == 5:
            assert stream.ready == []  # step 14 needs step 17
    steps, items, transitions = stream.take()
    np.testing.assert_array_equal(steps["done"], [0, 0, 0, 2])  # the bootstrap step holds obs[8]
    np.testing.assert_array_equal(steps["obs"][:, 0], [5, 6, 7, 8])
    np.testing.assert_array_equal(items, [14, 15, 16])  # none starts at the bootstrap step (17)
    np.testing.assert_array_equal(transitions["discount"], [0.125, 0.25, 0.5])  # the server's G^n'
    np.testing.assert_allclose(transitions["return"], [1.75, 1.5, 1.0])
    np.testing.assert_array_equal(transitions["next_obs"][:, 0], [8, 8, 8])
    assert stream.next_index == 18 and len(stream) == 0


def test_a_step_streams_items_wait_for_their_n_step_successor():
    stream = StepStream(2, 0.9, first_index=0)
    o = np.zeros(4, dtype=np.float32)
    for t in range(4):
        stream.step(o, 0, 1.0, o, terminated=False, truncated=False)
    steps, items, transitions = stream.take()
    assert len(steps["done"]) == 4
    np.testing.assert_array_equal(items, [0, 1])  # 2 needs step 4
    assert len(transitions["action"]) == 2 and len(stream.nstep) == 1  # the third one waits for its item


def test_apex_epsilons():
    assert apex_epsilon(0, 1) == 0.4
    assert [apex_epsilon(i, 4) for i in range(4)] == pytest.approx([0.4, 0.4 ** (1 + 7 / 3), 0.4 ** (1 + 14 / 3),
                                                                    0.4 ** 8])


def test_the_baseline_replay_samples_in_proportion_to_priority():
    replay = PrioritizedReplay(8, {"id": (np.int64, ())}, alpha=1.0, eps=0.0, seed=0)
    replay.add({"id": np.arange(4)}, np.array([1.0, 0.0, 3.0, 4.0]))
    counts = np.zeros(4)
    for _ in range(200):
        slots, weights, columns = replay.sample(64, beta=1.0)
        np.testing.assert_array_equal(columns["id"], slots)
        counts += np.bincount(slots, minlength=4)
        assert weights.max() == 1.0
    np.testing.assert_allclose(counts / counts.sum(), [0.125, 0.0, 0.375, 0.5], atol=0.01)
    replay.update(np.array([1]), np.array([8.0]))
    assert replay.tree[1] == 16.0
