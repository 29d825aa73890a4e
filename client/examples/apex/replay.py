"""An in-process proportional prioritized replay (Schaul et al. 2016) in NumPy,
for the baseline: a FIFO ring of transitions and a sum tree over
priority^alpha, updated and descended level by level for a whole batch at
once. The same sampling as perserve-server's: stratified, with IS weights
(N P(i))^-beta normalized to a maximum of 1 in the batch."""
from __future__ import annotations

import numpy as np


class PrioritizedReplay:
    def __init__(self, capacity: int, columns: dict[str, tuple[np.dtype, tuple]], alpha: float, eps: float,
                 seed: int) -> None:
        self.capacity, self.alpha, self.eps = capacity, alpha, eps
        self.leaves = 1 << (capacity - 1).bit_length()
        self.tree = np.zeros(2 * self.leaves)  # node i: children 2i, 2i+1; leaves at [leaves, 2 leaves)
        self.data = {name: np.zeros((capacity,) + shape, dtype=dtype) for name, (dtype, shape) in columns.items()}
        self.size = 0
        self.next = 0
        self.rng = np.random.default_rng(seed)

    def add(self, columns: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        n = len(priorities)
        slots = (self.next + np.arange(n)) % self.capacity
        for name, values in columns.items():
            self.data[name][slots] = values
        self.next = int((self.next + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        self.update(slots, priorities)

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the slots' priorities: O(batch log capacity)."""
        nodes = np.asarray(slots) + self.leaves
        self.tree[nodes] = (np.asarray(priorities) + self.eps) ** self.alpha
        while nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def sample(self, batch_size: int, beta: float) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(slots, IS weights, columns) of batch_size items drawn in proportion
        to priority^alpha, one from each of batch_size equal strata."""
        total = self.tree[1]
        targets = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        nodes = np.ones(batch_size, dtype=np.int64)
        while nodes[0] < self.leaves:
            left = self.tree[2 * nodes]
            right = targets > left
            targets -= np.where(right, left, 0.0)
            nodes = 2 * nodes + right
        slots = np.minimum(nodes - self.leaves, self.size - 1)
        probabilities = self.tree[slots + self.leaves] / total
        weights = (self.size * probabilities) ** -beta
        weights /= weights.max()
        return slots, weights, {name: values[slots] for name, values in self.data.items()}
