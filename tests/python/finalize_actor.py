"""A Python actor that never calls close() (tests/CMakeLists.txt:
python_finalize_closes_clients, beside perserve-server --column id:int64
--column value:float64 and tests/mpi/finalize_test.cc's learner, which waits
for every item).

    finalize_actor.py exit <n>      adds n items and returns: the package's
                                    atexit handler closes the actor.
    finalize_actor.py finalize <n>  adds n items and calls MPI.Finalize() by
                                    hand: the C++ library's hook flushes and
                                    closes the actor inside it, saying so on
                                    stderr; the close after that is harmless.

Run with ``python3 -m mpi4py`` so that a failed assertion ends the job.
"""
import os
import sys
import tempfile

import numpy as np
from mpi4py import MPI

import perserve


def finalize_capturing_stderr() -> str:
    """MPI.Finalize() with file descriptor 2 going to a temporary file; returns what was written."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            MPI.Finalize()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        said = capture.read().decode(errors="replace")
    sys.stderr.write(said)
    return said


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    rank = MPI.COMM_WORLD.rank
    actor = perserve.Actor(MPI.COMM_WORLD)
    for start in range(0, n, 10):
        ids = np.arange(start, min(start + 10, n), dtype=np.int64)
        actor.add({"id": ids, "value": ids * 0.5})
    if mode == "exit":
        return  # no flush, no close: interpreter exit does it
    said = finalize_capturing_stderr()  # no flush, no close
    line = f"perserve: rank {rank}: actor closed at MPI_Finalize; call close() yourself to see its errors"
    assert line in said, said
    assert actor.items_acknowledged == n, actor.items_acknowledged  # the hook flushed
    actor.close()  # closed already by the hook: harmless
    actor.close()
    assert actor.closed


if __name__ == "__main__":
    main()
