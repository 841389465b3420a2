"""What to do after a failed request: a pure decision, so it is testable without a cluster.

* A read or a plain (idempotent) write that failed transiently is **retried** with backoff.
* A lightweight transaction that failed transiently is **resolved**, never retried blindly: it
  may have been applied (a WriteTimeout of type CAS, a timeout or a dropped connection after the
  request left), so ``states.cassandra.unknown`` reads the row at SERIAL and compares.
  Unavailable and Overloaded are resolved the same way: usually they mean "not applied", but an
  Unavailable can also come from the commit phase after a proposal was accepted, and a serial
  read is right in every case.
* Anything else (invalid query, auth, server bug) is **raised**.
"""

from __future__ import annotations

import enum
import random

from cassandra import (
    CoordinationFailure,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

TRANSIENT: tuple[type[BaseException], ...] = (
    Unavailable, ReadTimeout, WriteTimeout, CoordinationFailure, OperationTimedOut, OverloadedErrorMessage,
    IsBootstrappingErrorMessage, ConnectionException, NoHostAvailable, ConnectionResetError, TimeoutError,
)


class Decision(enum.Enum):
    RETRY = "retry"  # send the same request again after a backoff
    RESOLVE = "resolve"  # outcome unknown: read at SERIAL and compare
    RAISE = "raise"  # not transient: the caller's bug or a server error


def decide(error: BaseException, *, lwt: bool) -> Decision:
    """The decision for ``error`` on a request that was (``lwt``) or was not a lightweight transaction."""
    if not isinstance(error, TRANSIENT):
        return Decision.RAISE
    return Decision.RESOLVE if lwt else Decision.RETRY


def backoff_s(attempt: int, initial_s: float, max_s: float, rand: random.Random | None = None) -> float:
    """Full-jitter exponential backoff before retry number ``attempt`` (0-based)."""
    cap = min(max_s, initial_s * (2 ** attempt))
    return (rand or random).uniform(cap / 2, cap)
