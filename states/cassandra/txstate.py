"""CassandraTransactionalStateStore: transactional-state documents and the coordinator lease, in one partition.

Table (one partition per topology, so every fenced write and the lease share Paxos state)::

    CREATE TABLE <ks>.trident_state (
        topology text, key text, value text,      -- JSON documents by key
        epoch bigint static,                      -- grows on every takeover; never expires
        owner text static,                        -- written USING TTL: an abandoned lease expires
        PRIMARY KEY ((topology), key))

* acquire: a serial read of (owner, epoch), then a conditional batch in the partition:
  ``SET owner = me USING TTL ttl`` + ``SET epoch = e + 1 IF epoch = e AND owner = <as read>``.
  The epoch is written without TTL, so it survives the owner's expiry and keeps growing.
* renew: ``UPDATE ... USING TTL ttl SET owner = me IF owner = me AND epoch = e``.
* release: ``UPDATE ... SET owner = null IF owner = me AND epoch = e``.
* lease_info: ``SELECT owner, epoch, TTL(owner)``: the holder and when its cell expires.
* put / delete: LWTs ``IF epoch = e`` (the static column, same partition); not applied means a
  newer coordinator took over: LeaseLostError, nothing written.
* get / keys: reads at the configured consistency. Safe because a coordinator reads after it
  took the lease with an LWT on this partition, and that LWT completed any Paxos round left in
  flight by its predecessor: every accepted write is visible at QUORUM from then on.

Unknown outcomes: ``put``, ``delete``, ``renew`` and ``release`` are idempotent under a fixed
epoch, so after a timeout they are resolved by a serial read (put/delete) or simply sent again
(renew/release). ``acquire`` is resolved by its next serial read: owner and epoch equal to what
we were writing means the takeover landed. Owner names must therefore be unique per process.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

from cassandra.cluster import ResultSet
from cassandra.query import BatchStatement, BatchType, Statement

from states.cassandra.retry import Decision, backoff_s, decide
from states.cassandra.schema import TableShape, check_cql_identifier, ensure_table
from states.cassandra.session import CassandraClient, shared_client
from states.cassandra.settings import CassandraSettings
from states.cassandra.unknown import serial
from states.errors import LeaseHeldError, LeaseLostError, StateError
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import Json, LeaseInfo

_ATTEMPTS = 8


class CassandraTransactionalStateStore:
    """:class:`~states.protocols.CoordinatorStore` of one topology in Cassandra: documents and the lease."""

    def __init__(self, settings: CassandraSettings, topology_id: str, *, table: str = "trident_state",
                 client: CassandraClient | None = None, metrics: StateMetrics = STATE_METRICS) -> None:
        self.settings, self.topology_id, self.metrics = settings, topology_id, metrics
        self.table = check_cql_identifier(table, "table name")
        self.client = client or shared_client(settings)
        shape = TableShape(check_cql_identifier(settings.keyspace, "keyspace name"), self.table,
                           (("topology", "text"), ("key", "text"), ("value", "text"), ("epoch", "bigint"),
                            ("owner", "text")), ("topology",), ("key",), ("epoch", "owner"))
        ensure_table(self.client, shape, metrics)
        t, p = shape.name, self.client.prepare
        self._get = p(f"SELECT value FROM {t} WHERE topology = ? AND key = ?", idempotent=True)
        self._keys = p(f"SELECT key FROM {t} WHERE topology = ? AND key >= ?", idempotent=True)
        self._lease = p(f"SELECT owner, epoch FROM {t} WHERE topology = ? LIMIT 1", idempotent=True)
        self._lease_ttl = p(f"SELECT owner, epoch, TTL(owner) AS owner_ttl FROM {t} WHERE topology = ? LIMIT 1",
                            idempotent=True)
        self._put = p(f"UPDATE {t} SET value = ? WHERE topology = ? AND key = ? IF epoch = ?", idempotent=False)
        self._delete = p(f"DELETE FROM {t} WHERE topology = ? AND key = ? IF epoch = ?", idempotent=False)
        self._take_owner = p(f"UPDATE {t} USING TTL ? SET owner = ? WHERE topology = ?", idempotent=False)
        self._bump_epoch = p(f"UPDATE {t} SET epoch = ? WHERE topology = ? IF epoch = ? AND owner = ?",
                             idempotent=False)
        self._renew = p(f"UPDATE {t} USING TTL ? SET owner = ? WHERE topology = ? IF owner = ? AND epoch = ?",
                        idempotent=False)
        self._release = p(f"UPDATE {t} SET owner = null WHERE topology = ? IF owner = ? AND epoch = ?",
                          idempotent=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "topology_id": self.topology_id, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickling re-runs __init__ so connections are reopened here (mypy flags calls of __init__ on an instance).
        self.__init__(state["settings"], state["topology_id"], table=state["table"])  # type: ignore[misc]

    # documents
    def get(self, key: str) -> Json | None:
        row = self.client.run_one(self._get, (self.topology_id, key), kind="read", metrics=self.metrics).one()
        return None if row is None or row["value"] is None else json.loads(row["value"])

    def keys(self, prefix: str) -> list[str]:
        rs = self.client.run_one(self._keys, (self.topology_id, prefix), kind="read", metrics=self.metrics)
        return sorted(k for r in rs if (k := r["key"]) is not None and k.startswith(prefix))

    def put(self, key: str, value: Json, *, epoch: int) -> None:
        doc = json.dumps(value, ensure_ascii=False)
        for attempt in range(_ATTEMPTS):
            self._pause(attempt)
            rs = self._lwt(self._put, (doc, self.topology_id, key, epoch))
            if rs is not None:
                return self._fenced(rs, epoch)
            _, current = self._serial_lease()  # unknown outcome: did it land?
            if current != epoch:
                raise LeaseLostError(self.topology_id, epoch, current)
            if self._serial_value(key) == doc:
                self.metrics.cas_unknown.labels(resolution="applied").inc()
                return None
            self.metrics.cas_unknown.labels(resolution="not_applied").inc()
        raise StateError(f"put of {key!r} for topology {self.topology_id!r}: outcome unknown {_ATTEMPTS} times")

    def delete(self, keys: Sequence[str], *, epoch: int) -> None:
        if not keys:
            return
        for attempt in range(_ATTEMPTS):
            self._pause(attempt)
            batch = BatchStatement(BatchType.UNLOGGED)  # one partition: atomic and isolated anyway
            for k in keys:
                batch.add(self._delete, (self.topology_id, k, epoch))
            rs = self._lwt(batch, None)
            if rs is not None:
                return self._fenced(rs, epoch)
            # Unknown outcome: a delete under our epoch is idempotent, so send it again while fenced.
            _, current = self._serial_lease()
            if current != epoch:
                raise LeaseLostError(self.topology_id, epoch, current)
        raise StateError(f"delete for topology {self.topology_id!r}: outcome unknown {_ATTEMPTS} times")

    # lease
    def acquire_lease(self, owner: str, ttl_s: float) -> int:
        writing: int | None = None
        for attempt in range(_ATTEMPTS):
            self._pause(attempt)
            held_by, epoch = self._serial_lease()
            if writing is not None and held_by == owner and epoch == writing:
                return writing  # the previous attempt's outcome was unknown: it landed
            if held_by not in (None, owner):
                raise LeaseHeldError(self.topology_id, held_by, epoch or 0)
            writing = (epoch or 0) + 1
            batch = BatchStatement(BatchType.UNLOGGED)
            batch.add(self._take_owner, (_ttl(ttl_s), owner, self.topology_id))
            batch.add(self._bump_epoch, (writing, self.topology_id, epoch, held_by))
            rs = self._lwt(batch, None, kind="lease")
            if rs is not None and rs.one()["[applied]"]:
                return writing
            if rs is not None:
                writing = None  # a race with another coordinator: read again and decide
        raise StateError(f"lease of topology {self.topology_id!r}: no decision after {_ATTEMPTS} attempts")

    def renew_lease(self, owner: str, epoch: int, ttl_s: float) -> None:
        for attempt in range(_ATTEMPTS):
            self._pause(attempt)
            rs = self._lwt(self._renew, (_ttl(ttl_s), owner, self.topology_id, owner, epoch), kind="lease")
            if rs is None:
                continue  # unknown: renewing under the same owner and epoch again is harmless
            row = rs.one()
            if not row["[applied]"]:
                raise LeaseLostError(self.topology_id, epoch, row.get("epoch"))
            return
        # Not "lost": Cassandra did not answer. The caller retries while the lease is surely still ours.
        raise StateError(f"renewal of the lease of topology {self.topology_id!r}: outcome unknown {_ATTEMPTS} times")

    def release_lease(self, owner: str, epoch: int) -> None:
        for attempt in range(_ATTEMPTS):
            self._pause(attempt)
            if self._lwt(self._release, (self.topology_id, owner, epoch), kind="lease") is not None:
                return

    def lease_info(self) -> LeaseInfo | None:
        """The current holder: the static columns, with the owner cell's remaining TTL as the expiry."""
        row = self.client.run_one(self._lease_ttl, (self.topology_id,), kind="read", metrics=self.metrics).one()
        if row is None or row["owner"] is None or row["epoch"] is None:
            return None
        ttl = row["owner_ttl"]
        return LeaseInfo(row["owner"], row["epoch"], None if ttl is None else time.time() + ttl)

    # helpers
    def _pause(self, attempt: int) -> None:
        """Back off before every attempt after the first (an unknown outcome or a lost race)."""
        if attempt:
            s = self.settings
            time.sleep(backoff_s(attempt - 1, s.backoff_initial_s, s.backoff_max_s))

    def _lwt(self, statement: Statement, values: Sequence[object] | None, *, kind: str = "cas") -> ResultSet | None:
        """The LWT's ResultSet, or None when its outcome is unknown."""
        result = self.client.run([(statement, values)], kind=kind, metrics=self.metrics, lwt=True)[0]
        if isinstance(result, BaseException):
            if decide(result, lwt=True) is not Decision.RESOLVE:
                raise result
            return None
        return result

    def _fenced(self, rs: ResultSet, epoch: int) -> None:
        row = rs.one()
        if not row["[applied]"]:
            raise LeaseLostError(self.topology_id, epoch, row.get("epoch"))

    def _serial_lease(self) -> tuple[str | None, int | None]:
        """(owner, epoch) read at serial consistency: final, with any Paxos round in flight completed."""
        row = self.client.run_one(serial(self.client, self._lease, (self.topology_id,)), None,
                                  kind="serial_read", metrics=self.metrics).one() or {}
        return row.get("owner"), row.get("epoch")

    def _serial_value(self, key: str) -> str | None:
        row = self.client.run_one(serial(self.client, self._get, (self.topology_id, key)), None,
                                  kind="serial_read", metrics=self.metrics).one()
        return None if row is None else row["value"]


def _ttl(ttl_s: float) -> int:
    if ttl_s <= 0:
        raise ValueError("lease ttl must be positive")
    return max(1, math.ceil(ttl_s))
