"""CartPole-v1 in NumPy, from the classic control equations (Barto, Sutton and
Anderson 1983; the same constants, Euler integration and thresholds as Gym's
CartPole-v1), with no Gym.

A reward of 1 for every step, the last included; an episode terminates when
the cart leaves [-2.4, 2.4] or the pole leans more than 12 degrees, and is
truncated after 500 steps. `CartPole` steps one environment with Python
floats (an actor's loop: no array overhead per step); `CartPoleBatch` steps
many at once with NumPy (the greedy evaluation). Both run the one `dynamics`.
"""
from __future__ import annotations

import math

import numpy as np

GRAVITY = 9.8
CART_MASS = 1.0
POLE_MASS = 0.1
TOTAL_MASS = CART_MASS + POLE_MASS
HALF_POLE_LENGTH = 0.5
POLE_MASS_LENGTH = POLE_MASS * HALF_POLE_LENGTH
FORCE = 10.0
TAU = 0.02  # seconds between state updates
THETA_LIMIT = 12 * 2 * math.pi / 360  # radians
X_LIMIT = 2.4
MAX_STEPS = 500
OBS_SIZE = 4
NUM_ACTIONS = 2


def dynamics(x, x_dot, theta, theta_dot, force, cos, sin):
    """One Euler step of the cart-pole equations of motion. Works on floats
    (cos, sin = math.cos, math.sin) or arrays (np.cos, np.sin) alike."""
    cos_theta, sin_theta = cos(theta), sin(theta)
    temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin_theta) / TOTAL_MASS
    theta_acc = (GRAVITY * sin_theta - cos_theta * temp) / (
        HALF_POLE_LENGTH * (4.0 / 3.0 - POLE_MASS * cos_theta * cos_theta / TOTAL_MASS))
    x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_theta / TOTAL_MASS
    return (x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc)


class CartPole:
    """One CartPole-v1 environment. `reset()` returns the observation
    (float32, shape (4,)); `step(action)` returns (obs, reward, terminated,
    truncated)."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self.state = (0.0, 0.0, 0.0, 0.0)
        self.steps = 0

    def reset(self) -> np.ndarray:
        self.state = tuple(float(v) for v in self._rng.uniform(-0.05, 0.05, OBS_SIZE))
        self.steps = 0
        return np.array(self.state, dtype=np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        force = FORCE if action == 1 else -FORCE
        self.state = dynamics(*self.state, force, math.cos, math.sin)
        self.steps += 1
        x, _, theta, _ = self.state
        terminated = x < -X_LIMIT or x > X_LIMIT or theta < -THETA_LIMIT or theta > THETA_LIMIT
        truncated = not terminated and self.steps >= MAX_STEPS
        return np.array(self.state, dtype=np.float32), 1.0, terminated, truncated


class CartPoleBatch:
    """`n` CartPole-v1 environments stepped together; an environment whose
    episode ended stays ended (`done`), and its returns stop counting."""

    def __init__(self, n: int, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self.n = n
        self.state = np.zeros((OBS_SIZE, n))
        self.done = np.ones(n, dtype=bool)
        self.returns = np.zeros(n)
        self.steps = 0

    def reset(self) -> np.ndarray:
        self.state = self._rng.uniform(-0.05, 0.05, (OBS_SIZE, self.n))
        self.done[:] = False
        self.returns[:] = 0.0
        self.steps = 0
        return self.observations()

    def observations(self) -> np.ndarray:
        return self.state.T.astype(np.float32)

    def step(self, actions: np.ndarray) -> np.ndarray:
        """Steps the environments still running; returns the observations."""
        force = np.where(actions == 1, FORCE, -FORCE)
        moved = np.array(dynamics(*self.state, force, np.cos, np.sin))
        self.state = np.where(self.done, self.state, moved)
        self.returns += ~self.done
        self.steps += 1
        x, theta = self.state[0], self.state[2]
        self.done |= (np.abs(x) > X_LIMIT) | (np.abs(theta) > THETA_LIMIT) | (self.steps >= MAX_STEPS)
        return self.observations()
