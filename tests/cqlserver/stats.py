"""Request counting: per opcode, per statement kind, per (table, read/write/cas).

Requests on system keyspaces (the driver's own metadata queries), USE, and
handshake messages are counted separately as "system" so that tests can assert
exact numbers of application requests regardless of driver background work.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field

from .faults import RequestInfo
from .wire import SERIAL_CONSISTENCIES


@dataclass(frozen=True)
class RequestRecord:
    """One received request, as kept in the request log."""

    opcode: str
    kind: str | None
    tables: tuple[str, ...]
    conditional: bool
    cql: str
    consistency: str | None
    serial_consistency: str | None
    system: bool


@dataclass(frozen=True)
class Stats:
    """Snapshot of counters since the last reset.

    requests: opcode -> count (application requests only)
    system_requests: opcode -> count (handshakes, USE, driver metadata queries)
    statements: kind (select/insert/update/delete/batch/ddl) -> count
    table_ops: (keyspace.table, op) -> count, op in read | serial_read | write | cas
    consistency: last consistency level seen per op (read/write/cas/batch/ddl/use)
    serial_consistency: last serial consistency of a conditional write ("cas")
    faults_fired: terminal faults that fired
    """

    requests: dict[str, int] = field(default_factory=dict)
    system_requests: dict[str, int] = field(default_factory=dict)
    statements: dict[str, int] = field(default_factory=dict)
    table_ops: dict[tuple[str, str], int] = field(default_factory=dict)
    consistency: dict[str, str] = field(default_factory=dict)
    serial_consistency: dict[str, str] = field(default_factory=dict)
    faults_fired: int = 0

    def ops(self, table: str, op: str) -> int:
        """Count of `op` on `table` ("t" sums over keyspaces, "ks.t" is exact)."""
        return sum(n for (t, o), n in self.table_ops.items()
                   if o == op and (t == table or t.split(".", 1)[-1] == table))


class StatsCollector:
    """Thread-safe counters plus a bounded request log."""

    def __init__(self, log_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._log: deque[RequestRecord] = deque(maxlen=log_size)
        self._requests: Counter[str] = Counter()
        self._system: Counter[str] = Counter()
        self._statements: Counter[str] = Counter()
        self._table_ops: Counter[tuple[str, str]] = Counter()
        self._consistency: dict[str, str] = {}
        self._serial: dict[str, str] = {}

    def reset(self) -> None:
        with self._lock:
            for counter in (self._requests, self._system, self._statements, self._table_ops):
                counter.clear()
            self._consistency.clear()
            self._serial.clear()
            self._log.clear()

    def control(self, opcode: str) -> None:
        """A handshake / control message (OPTIONS, STARTUP, AUTH_RESPONSE, REGISTER)."""
        with self._lock:
            self._system[opcode] += 1

    def request(self, info: RequestInfo, member_tables: list[str] | None = None) -> None:
        """Count a QUERY/PREPARE/EXECUTE/BATCH.

        `member_tables` lists the table of every statement of a batch: an
        unconditional batch counts one write per statement, a conditional batch
        (one Paxos round) one cas per table.
        """
        with self._lock:
            self._log.append(RequestRecord(info.opcode, info.kind, info.tables, info.conditional, info.cql,
                                           info.consistency, info.serial_consistency, info.system))
            if info.system:
                self._system[info.opcode] += 1
                return
            self._requests[info.opcode] += 1
            if info.opcode == "PREPARE":
                return
            self._statements[info.kind] += 1
            if info.kind in ("ddl", "use"):
                self._consistency[info.kind] = info.consistency
                return
            op = "read" if info.kind == "select" else ("cas" if info.conditional else "write")
            self._consistency[op] = info.consistency
            if info.kind == "batch":
                self._consistency["batch"] = info.consistency
            if op == "cas" and info.serial_consistency:
                self._serial["cas"] = info.serial_consistency
            tables = list(info.tables) if (info.kind != "batch" or info.conditional) else (member_tables or [])
            for table in tables:
                self._table_ops[(table, op)] += 1
                if op == "read" and info.consistency in SERIAL_CONSISTENCIES:
                    self._table_ops[(table, "serial_read")] += 1

    def snapshot(self, faults_fired: int) -> Stats:
        with self._lock:
            return Stats(dict(self._requests), dict(self._system), dict(self._statements),
                         dict(self._table_ops), dict(self._consistency), dict(self._serial), faults_fired)

    def log(self, include_system: bool = False) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self._log if include_system or not r.system]
