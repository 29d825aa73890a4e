"""perserve's exceptions: one class per status code, all subclasses of Error.

Every error the C++ client returns (from this rank's checks or from the
server) arrives as the class for its code, carrying ``code`` (the integer
status code, as perserve/status.h numbers them) and ``message``.
"""
from __future__ import annotations


class Error(Exception):
    """Base of every perserve error."""

    code: int = -1

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidArgumentError(Error, ValueError):
    """The caller passed something malformed (a column's dtype or shape, a priority)."""
    code = 1


class OutOfRangeError(Error, IndexError):
    code = 2


class FailedPreconditionError(Error):
    """The client or server is not in a state to do this (closed, nothing in flight)."""
    code = 3


class UnavailableError(Error):
    code = 4


class InternalError(Error):
    """A bug or a failed MPI call."""
    code = 5


class NotFoundError(Error, KeyError):
    """A key that was never issued."""
    code = 6

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class UnimplementedError(Error):
    code = 7


class ResourceExhaustedError(Error):
    """A memory or per-client allowance would be exceeded."""
    code = 8


class DeadlineExceededError(Error):
    """A request's timeout passed before it could be served."""
    code = 9


_BY_CODE = {cls.code: cls for cls in (InvalidArgumentError, OutOfRangeError, FailedPreconditionError,
                                      UnavailableError, InternalError, NotFoundError, UnimplementedError,
                                      ResourceExhaustedError, DeadlineExceededError)}


def _from_status(code: int, message: str) -> Error:
    """The exception for a status code (the C++ extension raises what this returns)."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else Error(message, code)
