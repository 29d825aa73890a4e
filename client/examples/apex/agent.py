"""The pieces an Ape-X DQN agent and its baseline share: the Q-network, a
NumPy copy of it for acting, n-step transitions with their initial
priorities, an actor's steps for the server's step stream, the double-DQN
learner and the greedy evaluation.

The learner trains with PyTorch (Debian's python3-torch); actors need only
NumPy: they act and compute initial priorities from a flat copy of the
learner's weights (`FlatWeights`), so an actor never imports torch.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from cartpole import NUM_ACTIONS, OBS_SIZE, CartPole, CartPoleBatch

# 64 units: Debian's python3-torch calls the reference BLAS, where a batch of
# 512 through 128-unit layers costs ~24 ms a step and 64 units ~5 ms.
HIDDEN = 64


@dataclasses.dataclass
class Config:
    """Hyperparameters; the defaults are the ones docs/apex.md measures."""
    gamma: float = 0.99
    n_step: int = 3
    batch_size: int = 512
    learning_rate: float = 1e-3
    target_update_every: int = 250  # learner steps
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    priority_eps: float = 1e-3
    capacity: int = 100_000
    min_size_to_sample: int = 2000
    add_batch: int = 50  # environment steps an actor sends at once
    eval_episodes: int = 20
    eval_every_seconds: float = 2.0
    solved_return: float = 475.0


def apex_epsilon(actor: int, actors: int) -> float:
    """Ape-X's per-actor exploration: 0.4^(1 + 7 i / (N - 1)); 0.4 for one actor."""
    return 0.4 if actors == 1 else 0.4 ** (1 + 7 * actor / (actors - 1))


def layer_shapes() -> list[tuple[int, ...]]:
    """The MLP's parameters in torch's order: (weight, bias) per layer."""
    sizes = [OBS_SIZE, HIDDEN, HIDDEN, NUM_ACTIONS]
    shapes = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        shapes += [(fan_out, fan_in), (fan_out,)]
    return shapes


def num_weights() -> int:
    return sum(int(np.prod(s)) for s in layer_shapes())


class FlatWeights:
    """The Q-network as NumPy arrays viewing one flat float32 vector (what the
    learner broadcasts): `q_values(obs)` for a batch of observations."""

    def __init__(self, flat: np.ndarray) -> None:
        self.layers = []
        offset = 0
        for shape in layer_shapes():
            size = int(np.prod(shape))
            self.layers.append(flat[offset:offset + size].reshape(shape))
            offset += size

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        h = obs
        for i in range(0, len(self.layers) - 2, 2):
            h = np.maximum(h @ self.layers[i].T + self.layers[i + 1], 0.0)
        return h @ self.layers[-2].T + self.layers[-1]


class NStepBuffer:
    """Turns one environment's steps into n-step transitions, in the layout
    the server's step streams return (docs/steps.md): obs, action, the return
    of up to n rewards, the discount to bootstrap with (gamma^k, or 0 where
    the episode terminated) and the observation n steps on. A truncated
    episode (the step limit) still bootstraps."""

    def __init__(self, n: int, gamma: float) -> None:
        self.n, self.gamma = n, gamma
        self.pending: deque = deque()
        self.out = {"obs": [], "action": [], "return": [], "next_obs": [], "discount": []}

    def __len__(self) -> int:
        return len(self.out["action"])

    def step(self, obs, action, reward, next_obs, terminated: bool, truncated: bool) -> None:
        self.pending.append((obs, action, reward))
        if len(self.pending) == self.n:
            self._emit(next_obs, 0.0 if terminated else self.gamma ** self.n)
        if terminated or truncated:
            while self.pending:
                self._emit(next_obs, 0.0 if terminated else self.gamma ** len(self.pending))

    def _emit(self, next_obs, discount: float) -> None:
        obs, action, _ = self.pending[0]
        ret = sum(r * self.gamma ** k for k, (_, _, r) in enumerate(self.pending))
        self.pending.popleft()
        for name, value in zip(self.out, (obs, action, ret, next_obs, discount)):
            self.out[name].append(value)

    def take(self, count: int | None = None) -> dict[str, np.ndarray]:
        """The first `count` transitions made so far (all of them by default),
        as the replay's columns; they leave the buffer."""
        count = len(self) if count is None else count
        out = {name: values[:count] for name, values in self.out.items()}
        self.out = {name: values[count:] for name, values in self.out.items()}
        return {"obs": np.array(out["obs"], dtype=np.float32).reshape(-1, OBS_SIZE),
                "action": np.array(out["action"], dtype=np.int64),
                "return": np.array(out["return"], dtype=np.float32),
                "next_obs": np.array(out["next_obs"], dtype=np.float32).reshape(-1, OBS_SIZE),
                "discount": np.array(out["discount"], dtype=np.float32)}


class StepStream:
    """One actor's environment steps for a server of step streams
    (`perserve-server --n-step n --discount gamma`, docs/steps.md): each step
    (obs, action, reward, done) is sent once, and the server computes the
    n-step transitions. done is 1 where the episode terminated; where it was
    cut off (the step limit), one more step holds the observation it was cut
    off at, with done 2, and the last transitions bootstrap from it.

    The transition at stream index t can be created once step t + n is
    appended, or its episode has ended; `take()` gives the steps so far and
    the indices of the items now whole, with the same transitions (from an
    NStepBuffer, which makes them in the same order) for their initial
    priorities."""

    def __init__(self, n: int, gamma: float, first_index: int) -> None:
        self.n = n
        self.nstep = NStepBuffer(n, gamma)
        self.next_index = first_index  # the stream index the next step gets
        self.open: deque = deque()  # this episode's steps whose items are not whole yet
        self.ready: list[int] = []
        self.steps: dict[str, list] = {"obs": [], "action": [], "reward": [], "done": []}

    def __len__(self) -> int:
        return len(self.steps["done"])

    def _append(self, obs, action: int, reward: float, done: int) -> None:
        for name, value in zip(self.steps, (obs, action, reward, done)):
            self.steps[name].append(value)
        self.next_index += 1

    def step(self, obs, action, reward, next_obs, terminated: bool, truncated: bool) -> None:
        self.nstep.step(obs, action, reward, next_obs, terminated, truncated)
        self.open.append(self.next_index)
        self._append(obs, action, reward, 1 if terminated else 0)
        if truncated and not terminated:
            self._append(next_obs, 0, 0.0, 2)  # the bootstrap step
        if terminated or truncated:
            self.ready.extend(self.open)
            self.open.clear()
        while self.open and self.open[0] + self.n < self.next_index:
            self.ready.append(self.open.popleft())

    def take(self) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """(the steps' columns, the stream indices of the items now whole,
        their n-step transitions); all three leave the stream."""
        steps = {"obs": np.array(self.steps["obs"], dtype=np.float32).reshape(-1, OBS_SIZE),
                 "action": np.array(self.steps["action"], dtype=np.int64),
                 "reward": np.array(self.steps["reward"], dtype=np.float32),
                 "done": np.array(self.steps["done"], dtype=np.uint8)}
        items = np.array(self.ready, dtype=np.int64)
        transitions = self.nstep.take(len(items))
        self.steps = {name: [] for name in self.steps}
        self.ready = []
        return steps, items, transitions


def act(env: CartPole, q: FlatWeights, nstep: NStepBuffer | StepStream, obs: np.ndarray, epsilon: float,
        rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """One epsilon-greedy environment step, its transition into `nstep`: the
    observation to act on next (a reset one after an episode ends) and
    whether an episode ended."""
    action = int(rng.integers(NUM_ACTIONS)) if rng.random() < epsilon else int(q.q_values(obs).argmax())
    next_obs, reward, terminated, truncated = env.step(action)
    nstep.step(obs, action, reward, next_obs, terminated, truncated)
    if terminated or truncated:
        return env.reset(), True
    return next_obs, False


def initial_priorities(q: FlatWeights, columns: dict[str, np.ndarray]) -> np.ndarray:
    """|n-step TD error| under the actor's copy of the network (Ape-X)."""
    q_obs = q.q_values(columns["obs"])[np.arange(len(columns["action"])), columns["action"]]
    q_next = q.q_values(columns["next_obs"]).max(axis=1)
    return np.abs(columns["return"] + columns["discount"] * q_next - q_obs)


def evaluate(q: FlatWeights, episodes: int, seed: int) -> float:
    """Mean return of the greedy policy over `episodes` episodes (run together)."""
    envs = CartPoleBatch(episodes, seed)
    obs = envs.reset()
    while not envs.done.all():
        obs = envs.step(q.q_values(obs).argmax(axis=1))
    return float(envs.returns.mean())


class DoubleDQN:
    """The learner: double DQN with a target network, Huber loss weighted by
    the importance-sampling weights, Adam, on `device`. `train(columns,
    weights)` takes one step on a sampled batch (torch tensors, as
    perserve.torch's TensorSampler gives them on that device, or NumPy
    arrays) and returns its |TD errors| (new priorities) as a tensor there."""

    def __init__(self, config: Config, seed: int, device: str = "cpu") -> None:
        import torch  # the learner's only: actors act with NumPy
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.torch = torch
        self.config = config
        self.device = torch.device(device)

        def mlp():
            return torch.nn.Sequential(torch.nn.Linear(OBS_SIZE, HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(HIDDEN, NUM_ACTIONS)).to(self.device)
        self.online, self.target = mlp(), mlp()
        self.target.load_state_dict(self.online.state_dict())
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=config.learning_rate)
        self.steps = 0

    def _tensor(self, values, dtype):
        """A tensor on the learner's device: the same one when it is already
        there with this dtype, a view of a NumPy array on the CPU."""
        return self.torch.as_tensor(values, device=self.device).to(dtype)

    def _targets(self, columns):
        """(obs, action, double-DQN targets) of a batch, without gradients."""
        torch = self.torch
        obs, next_obs = self._tensor(columns["obs"], torch.float32), self._tensor(columns["next_obs"], torch.float32)
        action = self._tensor(columns["action"], torch.int64)
        with torch.no_grad():
            best = self.online(next_obs).argmax(dim=1, keepdim=True)
            target = self._tensor(columns["return"], torch.float32) + \
                self._tensor(columns["discount"], torch.float32) * self.target(next_obs).gather(1, best).squeeze(1)
        return obs, action, target

    def train(self, columns, weights):
        torch = self.torch
        obs, action, target = self._targets(columns)
        is_weights = self._tensor(weights, torch.float32)
        q = self.online(obs).gather(1, action.unsqueeze(1)).squeeze(1)
        td = target - q
        loss = (is_weights * torch.nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.online.parameters(), 10.0)
        self.optimizer.step()
        self.steps += 1
        if self.steps % self.config.target_update_every == 0:
            self.target.load_state_dict(self.online.state_dict())
        return td.detach().abs()

    def td_errors(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """|double-DQN TD errors| of transitions, without training (the
        baseline's initial priorities)."""
        obs, action, target = self._targets(columns)
        with self.torch.no_grad():
            q = self.online(obs).gather(1, action.unsqueeze(1)).squeeze(1)
            return (target - q).abs().cpu().numpy().astype(np.float64)

    def flat_weights(self, out: np.ndarray) -> np.ndarray:
        """Writes the online network's parameters into `out` (float32, at least
        num_weights() long) in FlatWeights' layout."""
        offset = 0
        for p in self.online.parameters():
            size = p.numel()
            out[offset:offset + size] = p.detach().cpu().numpy().ravel()
            offset += size
        return out
