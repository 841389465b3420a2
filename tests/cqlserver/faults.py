"""Fault injection: match incoming requests, then delay, fail, or drop them.

A `Fault` = matchers (opcode, table, statement kind, conditional, CQL
substring, after/times) + one effect. Faults are checked in injection order;
every fault counts each request it matches (so `after=2` means "from the 3rd
matching request on"), delays add up (a hold waits until the test releases
it), and the first firing non-delay fault decides the outcome. Requests on
system keyspaces (driver metadata queries) only match faults that name a system
table explicitly; PREPARE and schema statements (DDL, USE) only match faults
that name that opcode / statement.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import CqlError, OverloadedError, ReadTimeoutError, ServerError, UnavailableError, WriteTimeoutError

WRITE_TIMEOUT = "write_timeout"
READ_TIMEOUT = "read_timeout"
UNAVAILABLE = "unavailable"
OVERLOADED = "overloaded"
SERVER_ERROR = "server_error"
DROP_CONNECTION = "drop_connection"
DELAY = "delay"


@dataclass(frozen=True)
class RequestInfo:
    """What the fault matchers see about one request."""

    opcode: str  # QUERY | PREPARE | EXECUTE | BATCH
    kind: str  # select|insert|update|delete|batch|ddl|use
    tables: tuple[str, ...]  # "keyspace.table"
    conditional: bool
    cql: str
    consistency: str = "ONE"
    serial_consistency: str | None = None
    system: bool = False


@dataclass(eq=False)
class Fault:
    """One injected fault. Build with the classmethods, e.g.

    Fault.write_timeout_cas(applied=True, table="word_counts", statement="update", after=2)
    """

    effect: str
    opcode: str | None = None
    table: str | None = None  # "table" or "keyspace.table"
    statement: str | None = None  # select|insert|update|delete|batch|ddl|use
    conditional: bool | None = None
    cql_contains: str | None = None
    after: int = 0  # let this many matching requests through first
    times: int | None = 1  # fire this many times (None: forever)
    applied: bool = False  # write_timeout / drop_connection: apply the mutation first
    write_type: str = "SIMPLE"
    seconds: float = 0.0
    release: threading.Event | None = None  # delay: held until this is set (``seconds`` at most)
    message: str = ""
    seen: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    # -- constructors ------------------------------------------------------
    @classmethod
    def write_timeout_cas(cls, applied: bool, **match: Any) -> Fault:
        """WriteTimeout with write type CAS; `applied` decides whether the CAS ran first."""
        match.setdefault("conditional", True)
        return cls(WRITE_TIMEOUT, applied=applied, write_type="CAS", **match)

    @classmethod
    def write_timeout(cls, write_type: str = "SIMPLE", applied: bool = False, **match: Any) -> Fault:
        return cls(WRITE_TIMEOUT, applied=applied, write_type=write_type, **match)

    @classmethod
    def read_timeout(cls, **match: Any) -> Fault:
        return cls(READ_TIMEOUT, **match)

    @classmethod
    def unavailable(cls, **match: Any) -> Fault:
        return cls(UNAVAILABLE, **match)

    @classmethod
    def overloaded(cls, **match: Any) -> Fault:
        return cls(OVERLOADED, **match)

    @classmethod
    def server_error(cls, message: str = "Injected server error", **match: Any) -> Fault:
        return cls(SERVER_ERROR, message=message, **match)

    @classmethod
    def drop_connection(cls, applied: bool = False, **match: Any) -> Fault:
        """Close the client's connection without answering (optionally after applying)."""
        return cls(DROP_CONNECTION, applied=applied, **match)

    @classmethod
    def delay(cls, seconds: float, **match: Any) -> Fault:
        """Add latency before the request is processed (combines with other faults)."""
        return cls(DELAY, seconds=seconds, **match)

    @classmethod
    def hold(cls, release: threading.Event, seconds: float = 30.0, **match: Any) -> Fault:
        """Hold the request until ``release`` is set (``seconds`` at most), then process it."""
        return cls(DELAY, seconds=seconds, release=release, **match)

    # -- matching ----------------------------------------------------------
    def matches(self, req: RequestInfo) -> bool:
        if self.opcode is not None and self.opcode.upper() != req.opcode:
            return False
        if self.opcode is None and req.opcode == "PREPARE":
            return False  # PREPARE only matches faults that ask for it
        if self.statement is not None and self.statement.lower() != req.kind:
            return False
        if self.statement is None and req.kind in ("ddl", "use"):
            return False  # schema statements only match faults that ask for them
        if self.conditional is not None and self.conditional != req.conditional:
            return False
        if self.cql_contains is not None and self.cql_contains.lower() not in req.cql.lower():
            return False
        if self.table is not None:
            wanted = self.table.lower()
            if not any(t.lower() == wanted or t.lower().split(".", 1)[-1] == wanted for t in req.tables):
                return False
        elif req.system:
            return False
        return True

    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times

    def error(self, req: RequestInfo) -> CqlError:
        """The ERROR this fault answers with (not for delay / drop_connection)."""
        cl = req.consistency
        if self.effect == WRITE_TIMEOUT:
            if self.write_type == "CAS":
                cl = req.serial_consistency or "SERIAL"
            return WriteTimeoutError("Operation timed out - received only 0 responses. (injected)", cl, 0, 1,
                                     self.write_type)
        if self.effect == READ_TIMEOUT:
            return ReadTimeoutError("Operation timed out - received only 0 responses. (injected)", cl, 0, 1, False)
        if self.effect == UNAVAILABLE:
            return UnavailableError("Cannot achieve consistency level " + cl + " (injected)", cl, 1, 0)
        if self.effect == OVERLOADED:
            return OverloadedError("Server is in overloaded state. (injected)")
        return ServerError(self.message or "Injected server error")


@dataclass
class Decision:
    delay: float = 0.0
    fault: Fault | None = None  # terminal fault that fired, if any
    holds: list[Fault] = field(default_factory=list)  # delays that end early when released

    def wait(self) -> None:
        """Sleep the plain delays, then wait for each hold's release (or its ``seconds``)."""
        if self.delay:
            time.sleep(self.delay)
        for hold in self.holds:
            assert hold.release is not None
            hold.release.wait(hold.seconds)


class FaultInjector:
    """Thread-safe ordered list of faults."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.fired_total = 0

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def decide(self, req: RequestInfo) -> Decision:
        decision = Decision()
        with self._lock:
            for fault in self._faults:
                if fault.exhausted() or not fault.matches(req):
                    continue
                fault.seen += 1
                if fault.seen <= fault.after:
                    continue
                if fault.effect == DELAY:
                    fault.fired += 1
                    if fault.release is not None:
                        decision.holds.append(fault)
                    else:
                        decision.delay += fault.seconds
                elif decision.fault is None:
                    fault.fired += 1
                    self.fired_total += 1
                    decision.fault = fault
        return decision
