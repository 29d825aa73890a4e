"""Actor, Learner and Bystander: perserve's client library for Python.

Each wraps the C++ client (libperserve_client.so) through the _perserve
extension. Joins are collective over the mpi4py communicator passed (every
rank of it joins once, the replay ranks inside perserve-server). Calls that
wait on MPI release the GIL.

Clients still open at interpreter exit are closed then (an actor flushes
first); a client still open when MPI_Finalize runs (``MPI.Finalize()`` called
by hand) is closed by the C++ library inside it, with a line on stderr; one
dropped without ``close()`` closes when it is collected. A close after any of
these is harmless. An error of such a close reaches no caller: it is printed
to stderr with the rank, and the interpreter exits with status 1.
"""
from __future__ import annotations

import atexit
import math
import sys
import weakref
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import numpy as np
from mpi4py import MPI

from . import _perserve
from .errors import FailedPreconditionError, InternalError, InvalidArgumentError

_open_clients: "weakref.WeakSet[_Client]" = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    # Python's atexit handlers run before mpi4py finalizes MPI: a client still
    # open at exit closes (flushing) while there is a server to tell. Nobody
    # is left to catch an error, so the C++ library prints it (naming the
    # rank) and counts it, and the interpreter then exits with status 1
    # (_perserve's Py_AtExit hook), as it does for an error printed by a close
    # at MPI_Finalize or in the destructor of a client never closed.
    for client in list(_open_clients):
        try:
            client.close()
        except Exception as error:  # noqa: BLE001 - reported, not raised, at exit
            _perserve.report_unreceived_close_error(type(client).__name__.lower(), "at interpreter exit",
                                                    getattr(error, "code", InternalError.code), str(error))


def _abort_job_on_uncaught_exception() -> None:
    """Makes an uncaught exception end the whole MPI job, as ``python3 -m
    mpi4py`` does: in a plain ``python3`` rank it ends only that rank, while
    the server and the other ranks wait for it for ever (a learner that
    raised leaves its actors adding). Installed at a client's join, once,
    around whatever excepthook is set then (which still prints the
    traceback); not in an interactive session, where an exception ends
    nothing. A hook set after the join replaces it."""
    if getattr(sys.excepthook, "_perserve_aborts_job", False) or sys.flags.interactive or hasattr(sys, "ps1"):
        return
    previous = sys.excepthook

    def print_then_abort(kind, value, traceback) -> None:
        previous(kind, value, traceback)
        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            print(f"perserve: rank {MPI.COMM_WORLD.Get_rank()}: uncaught {kind.__name__}: aborting the MPI job "
                  "(as python3 -m mpi4py would)", file=sys.stderr, flush=True)
            MPI.COMM_WORLD.Abort(1)

    print_then_abort._perserve_aborts_job = True
    sys.excepthook = print_then_abort


def _host_array(values: Any, dtype: type) -> np.ndarray:
    """A C-contiguous NumPy array of ``dtype`` from an array, a list or a
    tensor on any device (torch's: detached and copied to the host; the
    package does not import torch for it)."""
    if hasattr(values, "detach") and hasattr(values, "cpu"):
        values = values.detach().cpu().numpy()
    return np.ascontiguousarray(values, dtype=dtype)


def _timeout_seconds(timeout: Optional[float]) -> float:
    """A timeout as the C++ client takes it: seconds, 0 for none (None or infinity)."""
    if timeout is None:
        return 0.0
    seconds = float(timeout)
    if math.isinf(seconds) and seconds > 0:
        return 0.0
    if not seconds > 0:  # also NaN
        raise InvalidArgumentError(f"timeout must be None or > 0 seconds, given {timeout!r}")
    return seconds


def _update_arrays(keys: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray]:
    """An update's keys (uint64) and priorities (float64), checked to match."""
    keys, priorities = _host_array(keys, np.uint64), _host_array(priorities, np.float64)
    if keys.ndim != 1 or keys.shape != priorities.shape:
        raise InvalidArgumentError(f"keys of shape {keys.shape} but priorities of shape {priorities.shape}")
    return keys, priorities


class UpdateResult(NamedTuple):
    """Counts over priority updates the server acknowledged."""
    applied: int
    stale: int    # keys whose items had been overwritten: dropped by the server
    dropped: int  # bad priorities the server dropped (perserve-server --drop-bad-priorities)


class ReplayInfo(NamedTuple):
    """What one table of the replay holds, over all its server ranks (Learner.info)."""
    size: int          # items stored
    items_added: int   # items ever stored (every actor's acknowledged adds)
    total: float       # sum of the leaves, priority^alpha
    shards: int        # server ranks
    shards_ready: int  # those holding their --min-size-to-sample


class Column(NamedTuple):
    """One column of the replay's schema: what each item holds."""
    name: str
    dtype: np.dtype
    shape: tuple

    @property
    def item_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.name}:{self.dtype}:{','.join(map(str, self.shape))}"


def _schema(raw: list) -> list[Column]:
    return [Column(name, np.dtype(dtype), tuple(shape)) for name, dtype, shape in raw]


class Items(NamedTuple):
    """Items an actor creates in one table of a step server (``Actor.append``
    with several tables): ``steps`` the stream indices of the items' steps,
    ``priorities`` None (the server's maximum) or one per item, ``columns``
    the table's item columns by name (``Actor.item_schema(table)``), one row
    per item, or None when it has none."""
    steps: Any
    priorities: Any = None
    columns: Optional[Mapping[str, Any]] = None


class TableColumns(list):
    """A table's columns (a list of ``Column``), as ``Learner.schema`` gives
    the default table's; called with a table's name, the columns of that
    table's samples: ``learner.schema("r2d2")`` (None: the default table's)."""

    def __init__(self, columns: list, by_table: Mapping[str, list]) -> None:
        super().__init__(columns)
        self._by_table = by_table

    def __call__(self, table: Optional[str] = None) -> list[Column]:
        if table is None:
            return list(self)
        _check_table(list(self._by_table), table)
        return list(self._by_table[table])


def _check_table(tables: Sequence[str], table: Optional[str]) -> str:
    """The table's name as the C++ client takes it ("" for the default
    table, None), after checking the server serves it."""
    if table is None:
        return ""
    if table not in tables:
        names = ", ".join(f'"{name}"' for name in tables)
        raise InvalidArgumentError(f'no table "{table}": the server\'s tables are {names}; nothing was sent')
    return table


def _fortran_handle(comm: Optional[MPI.Comm]) -> int:
    return (MPI.COMM_WORLD if comm is None else comm).py2f()


def _check_columns(schema: list[Column], columns: Mapping[str, Any]) -> tuple[int, list[np.ndarray]]:
    """The arrays in schema order, after checking each by name: dtype, shape, item count."""
    names = [c.name for c in schema]
    described = "; ".join(str(c) for c in schema)
    for name in columns:
        if name not in names:
            raise InvalidArgumentError(f'column "{name}" is not in the schema ({described}); nothing was sent')
    size = None
    first = None
    arrays = []
    for column in schema:
        if column.name not in columns:
            raise InvalidArgumentError(f'column "{column.name}" is missing: expected {column.dtype} items of '
                                       f'shape {column.shape}; nothing was sent')
        given = columns[column.name]
        # Arrays (NumPy, or anything with a dtype) must match exactly; plain
        # Python lists and numbers carry no dtype and take the column's.
        array = np.asarray(given) if hasattr(given, "dtype") else np.asarray(given, dtype=column.dtype)
        if array.dtype != column.dtype:
            raise InvalidArgumentError(f'column "{column.name}": expected dtype {column.dtype}, given '
                                       f'{array.dtype}; nothing was sent')
        if array.ndim != 1 + len(column.shape) or tuple(array.shape[1:]) != column.shape:
            expected = "(n, " + ", ".join(map(str, column.shape)) + ")" if column.shape else "(n,)"
            raise InvalidArgumentError(f'column "{column.name}": expected shape {expected}, given '
                                       f'{tuple(array.shape)}; nothing was sent')
        if size is None:
            size, first = array.shape[0], column.name
        elif array.shape[0] != size:
            raise InvalidArgumentError(f'column "{column.name}" has {array.shape[0]} items, column "{first}" '
                                       f'{size}; nothing was sent')
        arrays.append(np.ascontiguousarray(array))
    return int(size), arrays


class _Client:
    _handle: Any = None

    @property
    def schema(self) -> list[Column]:
        """The replay's columns, as the server declared them, in order."""
        return self._schema

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _live(self) -> Any:
        if self._handle is None:
            raise FailedPreconditionError(f"the {type(self).__name__.lower()} is closed")
        return self._handle

    def peers(self) -> MPI.Comm:
        """A new communicator over every non-server rank (actors, learners,
        bystanders), for broadcasting weights without the server rank.
        Collective: every non-server rank calls its ``peers()``. The caller
        owns it (``Free()`` it when done)."""
        return MPI.Comm.f2py(self._live().peers())

    def close(self) -> None:
        """Flushes, then tells the server this client is done. Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _open_clients.discard(self)
        handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class Actor(_Client):
    """Sends transitions to its replay rank.

    ``add`` checks each column by name against ``schema`` (dtype, shape, item
    count) and the priorities (finite, >= 0), then copies the batch into a
    message and returns once it is sent; at most ``max_in_flight`` batches
    wait for the server's acknowledgement. A batch the server rejects raises
    at the next ``add`` or ``flush``.

    ``add_timeout`` (seconds, None for none) goes with every add: an add the
    server's rate limiter still holds back that long after it arrived is
    rejected with ``DeadlineExceededError`` (at the next ``add`` or
    ``flush``, like any rejected batch) and nothing of it is stored.
    """

    def __init__(self, comm: Optional[MPI.Comm] = None, *, max_in_flight: int = 4,
                 add_timeout: Optional[float] = None) -> None:
        self._handle = _perserve.Actor(_fortran_handle(comm), max_in_flight, _timeout_seconds(add_timeout))
        _abort_job_on_uncaught_exception()
        self._schema = _schema(self._handle.schema())
        self._tables = list(self._handle.tables())
        self._item_schemas = {name: _schema(self._handle.item_schema(name)) for name in self._tables}
        self._item_schema = _schema(self._handle.item_schema(""))
        _open_clients.add(self)

    def tables(self) -> list[str]:
        """The server's tables' names, in its order (the default table first)."""
        return list(self._tables)

    @property
    def stores_steps(self) -> bool:
        """Whether the server stores step streams (``perserve-server --n-step``
        or ``--sequence-length``): then ``append`` steps, not ``add``."""
        return self._live().stores_steps()

    @property
    def item_schema(self) -> "TableColumns":
        """The columns an item of the default table carries
        (``perserve-server --item-column``); ``actor.item_schema(table)``
        gives another table's."""
        return TableColumns(self._item_schema, self._item_schemas)

    @property
    def steps_appended(self) -> int:
        """The steps this actor's stream holds so far: the next step's index
        (after a server's --restore, the stream's count at the checkpoint; the
        first step appended then begins a new episode)."""
        return self._live().steps_appended

    def _group(self, table: str, items: Any, priorities: Any, item_columns: Optional[Mapping[str, Any]]) -> tuple:
        """One table's items as the extension takes them, checked: (table,
        item steps, priorities or None, item column arrays)."""
        item_schema = self._item_schemas[table] if table else self._item_schema
        item_steps = np.ascontiguousarray([] if items is None else items, dtype=np.int64).reshape(-1)
        in_table = f' (table "{table}")' if table else ""
        if priorities is not None:
            priorities = np.ascontiguousarray(priorities, dtype=np.float64)
            if priorities.shape != item_steps.shape:
                raise InvalidArgumentError(f"{priorities.size} priorities for {item_steps.size} items{in_table}; "
                                           "nothing was sent")
        item_arrays: list = []
        if item_columns is not None or (item_schema and item_steps.size > 0):
            count, item_arrays = _check_columns(item_schema, item_columns or {})
            if count != item_steps.size:
                raise InvalidArgumentError(f"{item_steps.size} items{in_table} with item columns of {count} rows; "
                                           "nothing was sent")
        return (table, item_steps, priorities, item_arrays)

    def append(self, steps: Optional[Mapping[str, Any]] = None, items: Any = None, priorities: Any = None,
               item_columns: Optional[Mapping[str, Any]] = None, *, block: bool = True,
               table: Optional[str] = None) -> bool:
        """Appends steps to this actor's stream and creates items over it
        (a server of step streams; docs/steps.md). ``steps`` maps every step
        column (``schema``) to an array of shape ``(n,) + column.shape``, or
        is None for no steps; the stream's steps are numbered from 0, and
        these get ``steps_appended .. steps_appended + n - 1``. ``items``: the
        stream indices of the items to create (these steps included);
        ``priorities`` None (the server's maximum) or one per item;
        ``item_columns`` the item columns (``item_schema``), one row per item.
        ``table``: the table the items go to (None: the default table).

        Items in several tables in one request: ``items`` a dict mapping each
        table's name to its ``Items(steps, priorities, columns)`` (or to just
        its stream indices), with ``priorities``, ``item_columns`` and
        ``table`` left None.

        Checked here as ``add`` is (a table the server does not serve raises
        ``InvalidArgumentError`` naming its tables); the server refuses an
        item over steps it no longer holds or that are not all appended yet
        (the n steps after an n-step item's, a sequence's L), raising at the
        next ``append`` or ``flush``, and that request's steps are then not in
        the stream. ``block`` as for ``add``."""
        handle = self._live()
        size, arrays = (0, []) if steps is None else _check_columns(self._schema, steps)
        if isinstance(items, Mapping):
            if priorities is not None or item_columns is not None or table is not None:
                raise InvalidArgumentError("items for several tables (a dict) carry their own priorities and item "
                                           "columns (perserve.Items), and name their tables; nothing was sent")
            groups = []
            for name, given in items.items():
                given = given if isinstance(given, Items) else Items(given)
                groups.append(self._group(_check_table(self._tables, name), given.steps, given.priorities,
                                          given.columns))
        else:
            groups = [self._group(_check_table(self._tables, table), items, priorities, item_columns)]
        if not block and not handle.can_add():
            return False
        handle.append(size, arrays, groups)
        return True

    def add(self, columns: Mapping[str, Any], priorities: Any = None, *, block: bool = True,
            table: Optional[str] = None) -> bool:
        """Adds n transitions: ``columns`` maps every column name to an array
        of shape ``(n,) + column.shape`` and the column's dtype; priorities
        None (the server's running maximum) or n floats, finite and >= 0;
        ``table`` the table of transitions they go to (None: the default
        table). Waits while ``max_in_flight`` batches are unacknowledged; with
        ``block=False`` it does not: it sends nothing and returns False
        (the server's rate limiter is holding the actor back: act, take new
        weights, and add again later). Returns True when the batch was sent."""
        handle = self._live()
        name = _check_table(self._tables, table)
        size, arrays = _check_columns(self._schema, columns)
        if priorities is not None:
            priorities = np.ascontiguousarray(priorities, dtype=np.float64)
            if priorities.shape != (size,):
                raise InvalidArgumentError(f"{priorities.size} priorities for {size} items; nothing was sent")
        if not block and not handle.can_add():
            return False
        handle.add(size, arrays, priorities, name)
        return True

    def flush(self) -> None:
        """Waits until every batch is acknowledged; raises for batches the
        server rejected (a count with the first error)."""
        self._live().flush()

    @property
    def items_acknowledged(self) -> int:
        return self._handle.items_acknowledged if self._handle is not None else self._closed_items

    def close(self) -> None:
        if self._handle is not None:
            self._closed_items = self._handle.items_acknowledged
        super().close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.items_acknowledged} items acknowledged"
        return f"perserve.Actor(schema=[{'; '.join(map(str, self._schema))}], {state})"


class _Batch:
    """What a sample is, in any form (this Sample, perserve.torch's
    TensorSample): ``keys`` and ``columns`` by name, a size, and a repr."""

    __slots__ = ()

    @property
    def size(self) -> int:
        return int(self.keys.shape[0])

    def __len__(self) -> int:
        return self.size

    def _describe(self, name: str, *more: str) -> str:
        shapes = ", ".join(f"{column}: {a.dtype}{list(a.shape)}" for column, a in self.columns.items())
        return f"{name}(size={self.size}, {', '.join(more + (shapes,))})"


class Sample(_Batch):
    """One sample of one table (``table``, its name). ``columns`` maps each
    of the table's column names to an array of shape ``(size,) +
    column.shape`` with the column's dtype; those arrays, ``keys``,
    ``weights`` and ``probabilities`` are views of the received message
    (``message``), which lives as long as any of them. Pass ``keys`` back to
    ``update_priorities`` with the same ``table``."""

    __slots__ = ("keys", "weights", "probabilities", "columns", "message", "table")

    def __init__(self, raw: tuple, schemas: Mapping[str, list[Column]]) -> None:
        self.keys, self.weights, self.probabilities, self.message, arrays, self.table = raw
        self.columns = {column.name: array for column, array in zip(schemas[self.table], arrays)}

    def __repr__(self) -> str:
        return self._describe("perserve.Sample")


class Learner(_Client):
    """Samples from its replay rank and sends priority updates.

    ``sample`` keeps up to ``prefetch`` requests of the same batch size and
    beta in flight, so the next samples travel while the caller trains;
    ``update_priorities`` returns without waiting for the server, and its
    acknowledgement is collected in the background: a rejection raises from
    the first call that finds it arrived, at the latest from the ``sample``
    that receives a request sent after the update (docs/python.md).

    With several server ranks the learner samples over all of them as one
    replay (each item with its share of the global total) and sends each
    key's update to the shard that issued it; ``exact_shard_totals=True``
    asks every shard for its total before each sample instead of using its
    last reply's (docs/shards.md).
    """

    def __init__(self, comm: Optional[MPI.Comm] = None, prefetch: int = 2, *, max_in_flight: int = 4,
                 exact_shard_totals: bool = False) -> None:
        self._prefetch = prefetch
        self._handle = _perserve.Learner(_fortran_handle(comm), prefetch, max_in_flight, exact_shard_totals)
        _abort_job_on_uncaught_exception()
        self._tables = list(self._handle.tables())
        self._schemas = {name: _schema(self._handle.schema(name)) for name in self._tables}
        self._schema = self._schemas[self._tables[0]]
        _open_clients.add(self)

    @property
    def schema(self) -> "TableColumns":
        """The columns of the default table's samples, as the server declared
        them, in order; ``learner.schema(table)`` gives another table's."""
        return TableColumns(self._schema, self._schemas)

    def tables(self) -> list[str]:
        """The server's tables' names, in its order (the default table first).
        Every call that takes ``table=`` means the default table with None."""
        return list(self._tables)

    def info(self, table: Optional[str] = None) -> "ReplayInfo":
        """A table's state now (None: the default table's), over all the
        server ranks (one round trip, answered at once): items stored, items
        ever added, the sum of the leaves, server ranks, and those holding
        their minimum size."""
        return ReplayInfo(*self._live().info(_check_table(self._tables, table)))

    def checkpoint(self) -> list:
        """Asks every server rank for a checkpoint and returns, once each is
        durable, their directories (one a shard). The servers keep serving
        meanwhile. FailedPreconditionError without --checkpoint-dir."""
        return self._live().checkpoint()

    @property
    def shards(self) -> int:
        """How many server ranks (shards) this learner samples over."""
        return self._handle.shards()

    def sample(self, batch_size: int, beta: float, timeout: Optional[float] = None, *,
               table: Optional[str] = None) -> Sample:
        """Draws batch_size items proportional to priority^alpha, with IS
        weights for ``beta``, with replacement (an item can come more than
        once); waits until the replay holds its minimum size.
        Samples prefetched with another batch size, beta or table are dropped.

        ``table``: the table to draw from (None: the default table), by its
        sampler; a table that is not prioritized gives weights of 1.

        ``timeout`` (seconds, None: wait as long as it takes): a request the
        server still defers that long after receiving it raises
        ``perserve.DeadlineExceededError``; the learner stays usable. The
        requests this call prefetches carry the same timeout, their clocks
        starting when the server receives them."""
        name = _check_table(self._tables, table)
        return Sample(self._live().sample(name, batch_size, beta, _timeout_seconds(timeout)), self._schemas)

    def request_sample(self, batch_size: int, beta: float, timeout: Optional[float] = None, *,
                       table: Optional[str] = None) -> None:
        """Sends one sample request (at most max(1, prefetch) in flight) to
        ``table`` (None: the default table); with ``timeout``, its
        ``receive_sample`` may raise DeadlineExceededError."""
        name = _check_table(self._tables, table)
        self._live().request_sample(name, batch_size, beta, _timeout_seconds(timeout))

    def receive_sample(self) -> Sample:
        """The reply to the oldest request in flight (requests are answered
        in order); its ``table`` is the one the request named."""
        return Sample(self._live().receive_sample(), self._schemas)

    @property
    def samples_in_flight(self) -> int:
        return 0 if self._handle is None else self._handle.samples_in_flight

    def update_priorities(self, keys: Any, priorities: Any, *, wait: bool = False,
                          table: Optional[str] = None) -> Optional[UpdateResult]:
        """New priorities for sampled keys (arrays, or torch tensors on any
        device; the server's policy judges them:
        perserve-server refuses an update with a NaN, infinite, negative or,
        without --priority-eps, zero priority whole, or with
        --drop-bad-priorities drops just those and counts them). Returns at
        once (None): a rejection raises from a later call, at the latest from
        the ``sample`` that receives a request sent after this update (the
        (prefetch+1)-th), or from ``flush``. With ``wait=True`` waits for the
        server and returns this update's ``UpdateResult(applied, stale,
        dropped)``, stale counting keys whose items were overwritten, dropped
        bad priorities the server dropped (``--drop-bad-priorities``).

        ``table``: the table the keys were sampled from (None: the default
        table; a key names an item only with its table). A table whose
        sampler keeps no priorities (uniform, fifo, lifo) raises
        ``InvalidArgumentError`` and nothing is sent."""
        name = _check_table(self._tables, table)
        keys, priorities = _update_arrays(keys, priorities)
        if wait:
            return UpdateResult(*self._live().update_and_wait(name, keys, priorities))
        self._live().send_update(name, keys, priorities)
        return None

    def flush(self) -> UpdateResult:
        """Waits for every priority update; raises for a rejected one; returns
        the totals ``UpdateResult(applied, stale, dropped)`` over acknowledged
        updates."""
        handle = self._live()
        handle.flush()
        return UpdateResult(*handle.updates())

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.samples_in_flight} samples in flight"
        return f"perserve.Learner(schema=[{'; '.join(map(str, self._schema))}], prefetch={self._prefetch}, {state})"


class Bystander:
    """A rank that joins but neither acts nor learns (it may take part in ``peers``)."""

    def __init__(self, comm: Optional[MPI.Comm] = None) -> None:
        self._handle = _perserve.Bystander(_fortran_handle(comm))
        _abort_job_on_uncaught_exception()

    def peers(self) -> MPI.Comm:
        """See Actor.peers."""
        return MPI.Comm.f2py(self._handle.peers())

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return "perserve.Bystander()"


def join_bystander(comm: Optional[MPI.Comm] = None) -> Bystander:
    """Joins as a bystander: collective over ``comm`` like the clients' joins."""
    return Bystander(comm)
