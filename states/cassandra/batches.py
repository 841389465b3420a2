"""Compare-and-set of many keys of a sharded table: one conditional batch per shard (see :mod:`.shards`).

A batch of conditional statements on one partition is one Paxos round: it applies whole if every
row's condition holds, and not at all otherwise, and a batch that did not apply returns the stored
columns of its rows that exist (absent rows return nothing). So each row's own answer is known:

* the batch applied: every row applied;
* it did not: a row whose stored value differs from what it was conditioned on **conflicted**, and
  is answered not applied with that value (as a single LWT would be); a row whose condition held was
  only held back by the others, and is sent again in the next batch of its shard, without them;
* the outcome is unknown (a timeout): the batch's rows are read back by one SERIAL read of its shard
  (``WHERE shard = ? AND word IN ?``, :func:`states.cassandra.unknown.resolve_partitions`), every timed-out
  shard of a wave at once, as its batches went: never one Paxos read per row, which would put hundreds of
  Paxos rounds at once on the partition that just timed out. The batch is atomic, so its rows agree.

At most one batch per shard is in flight (two Paxos rounds on one partition contend), so the keys of
a shard go out in waves of at most :data:`MAX_BATCH_ROWS` rows, every shard's next batch together.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from cassandra.cluster import ResultSet
from cassandra.query import BatchStatement, BatchType

from states.cassandra.requests import CasRequests
from states.cassandra.retry import Decision, decide
from states.cassandra.session import TUPLES
from states.cassandra.unknown import resolve_partitions
from states.errors import CommitProtocolError
from states.layout import Row
from states.protocols import CasResult

MAX_BATCH_ROWS = 200  # rows per conditional batch: one Paxos round each, a mutation far below Cassandra's limit


def cas_by_shard(backing: CasRequests, keys: Sequence[Any], expected: Sequence[Any],
                 values: Sequence[Any]) -> list[CasResult[Any]]:
    """Each key's compare-and-set answer, sent as conditional batches of one shard each."""
    return _ByShard(backing, keys, expected, values).run()


class _ByShard:
    """One ``multi_cas`` of a sharded table: the rows waiting per shard, and each row's answer."""

    def __init__(self, backing: CasRequests, keys: Sequence[Any], expected: Sequence[Any],
                 values: Sequence[Any]) -> None:
        self.backing = backing
        self.requests = [backing.cas_request(k, e, v) for k, e, v in zip(keys, expected, values, strict=True)]
        self.conditions = [backing.stored_row(e) for e in expected]  # what each row is conditioned on (None: absent)
        self.out: list[CasResult[Any] | None] = [None] * len(keys)
        self.queues: dict[Any, deque[int]] = {}
        for i, (_, _, key_row, _) in enumerate(self.requests):
            self.queues.setdefault(key_row[0], deque()).append(i)

    def run(self) -> list[CasResult[Any]]:
        backing = self.backing
        while self.queues:
            wave = [_take(q, self.requests) for q in self.queues.values()]
            self.queues = {shard: q for shard, q in self.queues.items() if q}
            batches = [(_batch([self.requests[i] for i in rows]), None) for rows in wave]
            results = backing.client.run(batches, kind="cas", metrics=backing.metrics, lwt=True, profile=TUPLES)
            unknown = []
            for rows, rs in zip(wave, results, strict=True):
                if isinstance(rs, BaseException):
                    if decide(rs, lwt=True) is not Decision.RESOLVE:
                        raise rs
                    unknown.append(rows)
                elif rs.one()[0]:
                    for i in rows:
                        self.out[i] = CasResult(True)
                else:
                    self._not_applied(rows, rs)
            if unknown:
                self._resolve(unknown)
        done = [r for r in self.out if r is not None]
        if len(done) != len(self.out):
            msg = "a compare-and-set was neither answered nor resolved"
            raise CommitProtocolError(msg)
        return done

    def _resolve(self, batches: list[list[int]]) -> None:
        """Batches of unknown outcome: one SERIAL read of each one's rows in its shard, all shards at once."""
        b = self.backing
        reads = []
        for rows in batches:
            key_rows = [self.requests[i][2] for i in rows]
            reads.append((b.shard_read_values(key_rows), key_rows, [self.requests[i][3] for i in rows]))
        width = len(self.requests[batches[0][0]][2])
        resolved = resolve_partitions(b.client, b.select_shard, reads, width, b.stored_columns,
                                      metrics=b.metrics)
        for rows, answers in zip(batches, resolved, strict=True):
            for i, (applied, current) in zip(rows, answers, strict=True):
                self.out[i] = CasResult(True) if applied else CasResult(False, b.value_of_row(current))

    def _not_applied(self, rows: list[int], rs: ResultSet) -> None:
        """Rows whose stored value differs from their condition conflicted; the others go again, without them."""
        current = self.backing.rows_returned(rs)
        held = [i for i in rows if current.get(self.requests[i][2]) == self.conditions[i]]
        if len(held) == len(rows):  # no row conflicted (never expected): answer each with what is stored
            held = []
        for i in set(rows).difference(held):
            self.out[i] = CasResult(False, self.backing.value_of_row(current.get(self.requests[i][2])))
        if held:
            self.queues.setdefault(self.requests[held[0]][2][0], deque()).extendleft(reversed(held))


def _take(queue: deque[int], requests: Sequence[tuple[Any, Row, Row, Row]]) -> list[int]:
    """The next batch of a shard: up to MAX_BATCH_ROWS rows, stopping before a key already in it."""
    rows: list[int] = []
    seen: set[Row] = set()
    while queue and len(rows) < MAX_BATCH_ROWS and requests[queue[0]][2] not in seen:
        i = queue.popleft()
        seen.add(requests[i][2])
        rows.append(i)
    return rows


def _batch(requests: Sequence[tuple[Any, Row, Row, Row]]) -> BatchStatement:
    """One conditional batch of one partition's rows (atomic and isolated, whatever its type)."""
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for statement, values, _, _ in requests:
        batch.add(statement, values)
    return batch
