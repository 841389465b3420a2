"""Resolving lightweight transactions whose outcome is unknown.

A compare-and-set that timed out (WriteTimeout with write type CAS), lost its connection, or
hit Unavailable/Overloaded may or may not have been applied. We never send it again blindly:
a second attempt of an applied write would fail its condition and look like a conflict with
ourselves, and the two outcomes cannot be told apart afterwards. Instead:

1. Read the row at SERIAL / LOCAL_SERIAL. A serial read runs Paxos on the partition, so it first
   completes any proposal still in flight (ours included): what it returns is final.
2. If the row holds exactly the value we were writing, report **applied**
   (``trident_cas_unknown_outcomes_total{resolution="applied"}``).
3. Otherwise report **not applied** with the row read as the current value
   (``resolution="not_applied"``); the caller recomputes from it and tries again, exactly as after
   an ordinary failed compare-and-set (``states.cas``), so no extra read is needed.

Subtle case: the row can equal our value although *our* write was not the one applied, because a
racing writer of the same txid (a zombie coordinator, a retried Spark task) computed and wrote the
same value. Reporting "applied" is still correct: the frozen batch gives every writer of txid N the
same partial, and the stored state is exactly the state we wanted. Nothing else we do depends on
whose write landed. Conversely our write may have landed and been overwritten before the serial
read; the opaque/transactional rules recompute from the newer value (or stop with StaleBatchError
if a later txid is stored, which ordered commits make impossible for a live batch).

A conditional batch of many rows of one partition (a sharded table) is resolved the same way by one
serial read of those rows (:func:`resolve_partitions`), never one per row: each serial read is a Paxos
round on the partition, and a few hundred of them at once on one partition overload the replicas that
just timed out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cassandra.query import BoundStatement, PreparedStatement

from states.cassandra.session import TUPLES, CassandraClient
from states.errors import UnknownOutcomeError
from states.layout import Row
from states.metrics import StateMetrics


def resolve(client: CassandraClient, select: PreparedStatement, key_rows: Sequence[Row],
            wanted: Sequence[Row], columns: Sequence[str], *, metrics: StateMetrics,
            ) -> list[tuple[bool, Row | None]]:
    """For each key, ``(applied, current stored row or None)`` from a serial read.

    ``select`` (prepared) selects ``columns`` by key; it is sent at the serial consistency.
    ``wanted`` holds the stored rows being written.
    """
    results = client.run([(serial(client, select, kr), None) for kr in key_rows], kind="serial_read",
                         metrics=metrics)
    out: list[tuple[bool, Row | None]] = []
    for kr, want, rs in zip(key_rows, wanted, results, strict=True):
        if isinstance(rs, BaseException):
            metrics.cas_unknown.labels(resolution="unresolved").inc()
            raise UnknownOutcomeError(kr, rs) from rs
        row = rs.one()
        current = None if row is None else tuple(row[c] for c in columns)
        out.append((settle(current, want, metrics), current))
    return out


def resolve_partitions(client: CassandraClient, select: PreparedStatement,
                       reads: Sequence[tuple[Sequence[Any], Sequence[Row], Sequence[Row]]], key_width: int,
                       columns: Sequence[str], *, metrics: StateMetrics) -> list[list[tuple[bool, Row | None]]]:
    """For each read ``(values, key rows, wanted rows)`` of rows of one partition, ``(applied, current stored row
    or None)`` per key row, from one serial read of ``select`` bound to ``values`` (all reads at once).

    ``select`` returns each row's ``key_width`` key columns then ``columns``; it may return more rows than
    asked for (an IN per key column selects their product): only the key rows asked for are answered.
    """
    results = client.run([(serial(client, select, values), None) for values, _, _ in reads], kind="serial_read",
                         metrics=metrics, profile=TUPLES)
    out: list[list[tuple[bool, Row | None]]] = []
    for (_, key_rows, wanted), rs in zip(reads, results, strict=True):
        if isinstance(rs, BaseException):
            metrics.cas_unknown.labels(resolution="unresolved").inc(len(key_rows))
            raise UnknownOutcomeError(key_rows[0], rs) from rs
        found = {tuple(row[:key_width]): tuple(row[key_width:]) for row in rs}
        out.append([(settle(found.get(kr), want, metrics), found.get(kr))
                    for kr, want in zip(key_rows, wanted, strict=True)])
    return out


def settle(current: Row | None, wanted: Row, metrics: StateMetrics) -> bool:
    """Whether the row a serial read found is the one being written (counted by resolution)."""
    applied = current == wanted
    metrics.cas_unknown.labels(resolution="applied" if applied else "not_applied").inc()
    return applied


def serial(client: CassandraClient, select: PreparedStatement, values: Sequence[Any]) -> BoundStatement:
    """``select`` bound to ``values``, to be read at the serial consistency (a Paxos read)."""
    bound = select.bind(values)
    bound.consistency_level = client.serial
    return bound
