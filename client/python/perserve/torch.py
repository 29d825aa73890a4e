"""Samples as torch tensors, without a copy, and a sampler thread that
pins them and moves them to a GPU while the learner trains.

    import perserve, perserve.torch

    batch = perserve.torch.as_tensors(learner.sample(512, beta=0.4))
    batch.columns["obs"]              # a torch.Tensor over the received message: no copy

    with perserve.torch.TensorSampler(learner, 512, beta=0.4, device="cuda") as sampler:
        for step in range(steps):
            batch = sampler.next()                          # on the GPU already
            td = train(batch.columns, batch.weights)
            sampler.update_priorities(batch.keys, td.abs())  # a tensor, on any device

On the CPU (``device=None`` or ``"cpu"``) every tensor is ``torch.from_numpy``
of the sample's array: it shares the message's memory, and keeps it alive,
as the arrays do. With a CUDA device the sampler's thread copies each
column into pinned memory and from there to the device on a stream of its
own, so the next batches travel while the caller trains. ``keys`` stay a
NumPy uint64 array (this torch has no uint64); they go back with the update.

Needs PyTorch (Debian's python3-torch); imported only by who uses it.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Optional

import numpy as np
import torch
from mpi4py import MPI

from .client import Learner, Sample, _Batch, _update_arrays
from .errors import FailedPreconditionError, InvalidArgumentError


class TensorSample(_Batch):
    """A sample whose ``weights``, ``probabilities`` and ``columns`` are
    torch tensors (on ``device``); ``keys`` the NumPy uint64 keys."""

    __slots__ = ("keys", "weights", "probabilities", "columns", "device")

    def __init__(self, keys: np.ndarray, weights: torch.Tensor, probabilities: torch.Tensor,
                 columns: dict[str, torch.Tensor], device: torch.device) -> None:
        self.keys, self.weights, self.probabilities, self.columns, self.device = (keys, weights, probabilities,
                                                                                  columns, device)

    def __repr__(self) -> str:
        return self._describe("perserve.torch.TensorSample", f"device={self.device}")


def _check_device(device: Any, pin_memory: Optional[bool]) -> tuple[torch.device, bool]:
    """The device, and whether to pin: by default where the device is CUDA."""
    device = torch.device("cpu" if device is None else device)
    if device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"device {device}: perserve.torch moves samples to 'cpu' or 'cuda' devices")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FailedPreconditionError(f"device {device}: torch.cuda.is_available() is False here (no GPU, or a "
                                      "PyTorch built without CUDA); use device='cpu'")
    pin = device.type == "cuda" if pin_memory is None else bool(pin_memory)
    if pin and not torch.cuda.is_available():
        raise FailedPreconditionError("pin_memory=True needs CUDA (pinned memory is for copies to a GPU), and "
                                      "torch.cuda.is_available() is False here")
    return device, pin


def _views(sample: Sample) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The sample's arrays as tensors sharing their memory (torch.from_numpy)."""
    return (torch.from_numpy(sample.weights), torch.from_numpy(sample.probabilities),
            {name: torch.from_numpy(array) for name, array in sample.columns.items()})


def as_tensors(sample: Sample, device: Any = None, *, pin_memory: Optional[bool] = None) -> TensorSample:
    """The sample as tensors: views of its message on the CPU (no copy); on
    a CUDA device, copied there (through pinned memory by default), the
    call returning once they are there."""
    device, pin = _check_device(device, pin_memory)
    weights, probabilities, columns = _views(sample)
    if device.type == "cpu" and not pin:
        return TensorSample(sample.keys, weights, probabilities, columns, device)
    move = _Mover(device, pin)
    return move(sample.keys, weights, probabilities, columns)


class _Mover:
    """Pins and copies a sample's tensors to the device on a stream of its
    own, returning once the copies are done (so the pinned buffers may go)."""

    def __init__(self, device: torch.device, pin: bool) -> None:
        self.device, self.pin = device, pin
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __call__(self, keys, weights, probabilities, columns) -> TensorSample:
        tensors = [weights, probabilities, *columns.values()]
        if self.pin:
            tensors = [t.pin_memory() for t in tensors]
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                tensors = [t.to(self.device, non_blocking=True) for t in tensors]
            self.stream.synchronize()
        return TensorSample(keys, tensors[0], tensors[1], dict(zip(columns, tensors[2:])), self.device)


class TensorSampler:
    """A thread that samples ``batch_size`` items with ``beta`` from
    ``learner``, turns each sample into tensors on ``device`` (pinned and
    copied there for CUDA, views on the CPU) and keeps up to ``depth`` of
    them ready; ``next()`` returns the oldest. The learner's own prefetch
    (``Learner(prefetch=k)``) keeps k more requests travelling behind them.

    While it runs, the thread alone calls the learner: send priority updates
    with ``update_priorities`` (taken in order, between samples; tensors on
    any device) rather than ``learner.update_priorities``. An error the
    thread meets (the server's UNAVAILABLE when it stops, a rejected update)
    raises from ``next()``. Setting ``beta`` applies to samples drawn after;
    up to ``depth`` + prefetch already drawn keep their weights.
    ``close()`` (or the ``with`` block's end) stops the thread after the
    sample it is waiting for, and sends the updates still queued.
    """

    def __init__(self, learner: Learner, batch_size: int, beta: float, *, device: Any = None,
                 pin_memory: Optional[bool] = None, depth: int = 2, timeout: Optional[float] = None) -> None:
        if depth < 1:
            raise InvalidArgumentError(f"depth must be at least 1, given {depth}")
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            raise FailedPreconditionError("TensorSampler calls MPI from its thread beside the caller's: MPI must "
                                          "be initialized with MPI_THREAD_MULTIPLE (mpi4py's default: "
                                          "mpi4py.rc.thread_level = 'multiple')")
        self.device, pin = _check_device(device, pin_memory)
        self.beta = beta
        self._learner, self._batch_size, self._timeout = learner, batch_size, timeout
        self._mover = None if self.device.type == "cpu" and not pin else _Mover(self.device, pin)
        self._ready: "queue.Queue[TensorSample]" = queue.Queue(maxsize=depth)
        self._updates: "queue.SimpleQueue[tuple]" = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._error: Optional[BaseException] = None  # what ended the thread, raised by next()
        self._thread = threading.Thread(target=self._run, name="perserve-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._send_updates()
                sample = self._learner.sample(self._batch_size, self.beta, self._timeout)
                weights, probabilities, columns = _views(sample)
                item = (TensorSample(sample.keys, weights, probabilities, columns, self.device)
                        if self._mover is None else self._mover(sample.keys, weights, probabilities, columns))
                del sample, weights, probabilities, columns  # moved: the message goes back to the learner's pool
                while not self._stopping.is_set():
                    try:
                        self._ready.put(item, timeout=0.05)
                        break
                    except queue.Full:
                        self._send_updates()  # the caller trains: its updates still go
            self._send_updates()
        except BaseException as error:  # noqa: BLE001 - raised by the caller's next()
            self._error = error

    def _send_updates(self) -> None:
        while True:
            try:
                keys, priorities = self._updates.get_nowait()
            except queue.Empty:
                return
            self._learner.update_priorities(keys, priorities)

    def next(self, timeout: Optional[float] = None) -> TensorSample:
        """The next sample as tensors (waits for it; ``timeout`` seconds at
        most, then ``queue.Empty``). Once the samples drawn before it are
        taken, raises what stopped the thread (the server's UNAVAILABLE, a
        rejected update), or FailedPreconditionError when closed."""
        waited = 0.0
        while True:
            try:
                item = self._ready.get(timeout=0.05)
                break
            except queue.Empty:
                if self._error is not None:
                    raise self._error
                if not self._thread.is_alive():
                    raise FailedPreconditionError("the sampler is closed") from None
                waited += 0.05
                if timeout is not None and waited >= timeout:
                    raise
        if self.device.type == "cuda":  # allocated on the sampler's stream, used on the caller's
            stream = torch.cuda.current_stream(self.device)
            for tensor in (item.weights, item.probabilities, *item.columns.values()):
                tensor.record_stream(stream)
        return item

    def __iter__(self):
        return self

    def __next__(self) -> TensorSample:
        return self.next()

    def update_priorities(self, keys: Any, priorities: Any) -> None:
        """Queues an update, sent by the thread before its next sample:
        ``keys`` as a sample gave them, ``priorities`` a tensor on any device
        (copied to the host here) or an array; shapes checked here."""
        if self._error is not None or not self._thread.is_alive():
            raise self._error or FailedPreconditionError("the sampler is closed: update through the learner")
        self._updates.put(_update_arrays(keys, priorities))

    def close(self, timeout: Optional[float] = None) -> None:
        """Stops the thread, once the sample it waits for has come (a
        learner's ``timeout`` bounds that), having sent the queued updates;
        drops the samples not taken. Does not close the learner."""
        self._stopping.set()
        self._thread.join(timeout)
        while not self._ready.empty():
            self._ready.get_nowait()

    def __enter__(self) -> "TensorSampler":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"perserve.torch.TensorSampler(batch_size={self._batch_size}, beta={self.beta}, device={self.device}, "
                f"ready={self._ready.qsize()})")
