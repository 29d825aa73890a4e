"""WeightBroadcast: a learner's network weights to its actors, over the peers
communicator, without blocking either side.

    peers = learner.peers()                      # collective over every non-server rank
    weights = perserve.WeightBroadcast(peers, source=flat_params)   # the learner
    weights = perserve.WeightBroadcast(peers)                        # every other peer
    ...
    weights.publish(flat_params)    # learner: False while the last round travels
    new = weights.poll()            # actor: the newest weights that arrived, or None
    weights.close()                 # learner: the last round, with stop; others: wait for it

The weights are one flat NumPy array (``torch.nn.utils.parameters_to_vector``
gives one). The constructor is collective: every peer builds one, the source
passes its first weights, and every peer leaves with them (``.weights``).
After that, round k is an ``MPI_Ibcast`` of [weights, stop] from the source;
every peer posts the rounds in order, one at a time, so nobody waits for
anybody: ``publish`` copies the weights and starts a round only once the
previous one has left the source (it returns False meanwhile: train on and
publish later), and ``poll`` takes every round that has arrived, posting the
next. Every peer takes part until the source's ``close`` (stop): a peer that
is done early calls ``close`` too, which receives the remaining rounds.
"""
from typing import Optional

import numpy as np
from mpi4py import MPI


class WeightBroadcast:
    def __init__(self, peers: MPI.Comm, source: Optional[np.ndarray] = None) -> None:
        self._peers = peers
        mine = peers.rank if source is not None else -1
        self.root = peers.allreduce(mine, op=MPI.MAX)
        if self.root < 0:
            raise ValueError("no peer passed source weights: the learner passes its first weights")
        if peers.allreduce(1 if source is not None else 0, op=MPI.SUM) != 1:
            raise ValueError("more than one peer passed source weights")
        shape = peers.bcast((source.size, source.dtype.str) if source is not None else None, root=self.root)
        size, dtype = shape[0], np.dtype(shape[1])
        # The last element carries the stop flag.
        self._buffer = np.zeros(size + 1, dtype=dtype)
        if source is not None:
            self._buffer[:size] = np.ravel(source)
        peers.Bcast(self._buffer, root=self.root)
        self.weights = self._buffer[:size].copy()
        self.rounds = 0          # rounds received (an actor) or published (the source)
        self.stopped = False
        self._request: Optional[MPI.Request] = None
        if not self.is_source:
            self._post()

    @property
    def is_source(self) -> bool:
        return self._peers.rank == self.root

    # The source's side.
    def publish(self, weights: np.ndarray) -> bool:
        """Starts a round with these weights (copied) unless the last round is
        still leaving: then returns False and nothing is sent."""
        self._check_source()
        if self._request is not None and not self._request.Test():
            return False
        self._buffer[:-1] = np.ravel(weights)
        self._request = self._peers.Ibcast(self._buffer, root=self.root)
        self.rounds += 1
        return True

    # Every other peer's side.
    def poll(self) -> Optional[np.ndarray]:
        """The newest weights among the rounds that have arrived since the
        last call (a copy, also kept in ``.weights``), or None."""
        self._check_not_source()
        newest = None
        while self._request is not None and self._request.Test():
            newest = self._take()
        return newest

    def wait(self) -> np.ndarray:
        """Waits for the next round, then takes any that arrived after it."""
        self._check_not_source()
        if self._request is None:
            raise RuntimeError("the source has closed: no round follows")
        self._request.Wait()
        self._take()
        self.poll()
        return self.weights

    def close(self) -> None:
        """The source: waits for the round in flight, then sends the last one,
        with stop, and waits for it. Another peer: takes rounds until that one."""
        if self.is_source:
            if self._request is not None:
                self._request.Wait()
            if not self.stopped:  # a round like the others (a blocking Bcast would not match them)
                self._buffer[-1] = 1
                self._peers.Ibcast(self._buffer, root=self.root).Wait()
                self.rounds += 1
                self.stopped = True
            self._request = None
            return
        while self._request is not None:
            self._request.Wait()
            self._take()

    def _post(self) -> None:
        self._request = self._peers.Ibcast(self._buffer, root=self.root)

    def _take(self) -> np.ndarray:
        self.rounds += 1
        self.weights = self._buffer[:-1].copy()
        if self._buffer[-1] != 0:
            self.stopped = True
            self._request = None
        else:
            self._post()
        return self.weights

    def _check_source(self) -> None:
        if not self.is_source:
            raise RuntimeError("only the peer that passed source weights publishes")
        if self.stopped:
            raise RuntimeError("the broadcast is closed")

    def _check_not_source(self) -> None:
        if self.is_source:
            raise RuntimeError("the source publishes; the other peers poll")
