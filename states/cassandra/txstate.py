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

Unknown outcomes, one rule for every write (:func:`states.cassandra.lwt.settle`): never taken as
applied or not applied, always decided. ``put``, ``delete``, ``renew`` and ``release`` are
idempotent under a fixed epoch: a put is resolved by a serial read of its row (and of the epoch), a
delete sent again while the epoch is ours, a renewal and a release simply sent again. ``acquire``
is resolved by a serial read: owner and epoch equal to what we were writing means the takeover
landed. Owner names must therefore be unique per process. A write still undecided after its
attempts raises :class:`~states.cassandra.lwt.LwtUndecidedError` (a release included: the caller
says the lease will expire with its TTL).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from cassandra.query import BatchStatement, BatchType, Statement

from states.cassandra.lwt import AGAIN, Again, Row, settle
from states.cassandra.retry import backoff_s
from states.cassandra.schema import TableShape, check_cql_identifier, ensure_table
from states.cassandra.session import CassandraClient, shared_client
from states.cassandra.settings import CassandraSettings
from states.cassandra.unknown import serial
from states.errors import LeaseHeldError, LeaseLostError
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

        def landed() -> Again | None:  # did it land? only while still fenced by our epoch
            self._check_epoch(epoch)
            applied = self._serial_value(key) == doc
            self.metrics.cas_unknown.labels(resolution="applied" if applied else "not_applied").inc()
            return None if applied else AGAIN

        self._settle(f"put of {key!r}", self._put, (doc, self.topology_id, key, epoch),
                     lambda row: self._fenced(row, epoch), landed)

    def delete(self, keys: Sequence[str], *, epoch: int) -> None:
        if not keys:
            return
        batch = BatchStatement(BatchType.UNLOGGED)  # one partition: atomic and isolated anyway
        for k in keys:
            batch.add(self._delete, (self.topology_id, k, epoch))

        def resend() -> Again:  # a delete under our epoch is idempotent: send it again while fenced
            self._check_epoch(epoch)
            return AGAIN

        self._settle(f"delete of {len(keys)} key(s)", batch, None, lambda row: self._fenced(row, epoch), resend)

    # lease
    def acquire_lease(self, owner: str, ttl_s: float) -> int:
        read: tuple[str | None, int | None] = (None, None)  # (owner, epoch) as read before this attempt's batch

        def read_lease() -> None:  # a serial read decides what to write
            nonlocal read
            read = self._serial_lease()
            if read[0] not in (None, owner):
                raise LeaseHeldError(self.topology_id, str(read[0]), read[1] or 0)

        def take() -> Row:
            batch = BatchStatement(BatchType.UNLOGGED)
            batch.add(self._take_owner, (_ttl(ttl_s), owner, self.topology_id))
            batch.add(self._bump_epoch, ((read[1] or 0) + 1, self.topology_id, read[1], read[0]))
            return self._send(batch, None, kind="lease")

        def landed() -> int | Again:  # owner and epoch equal to what we wrote: the takeover landed
            return (read[1] or 0) + 1 if self._serial_lease() == (owner, (read[1] or 0) + 1) else AGAIN

        return settle(f"lease of topology {self.topology_id!r}", take,
                      lambda row: (read[1] or 0) + 1 if row["[applied]"] else AGAIN,  # not applied: a race
                      landed, attempts=_ATTEMPTS, pause=self._pause, prepare=read_lease)

    def renew_lease(self, owner: str, epoch: int, ttl_s: float) -> None:
        # Unknown: renewing under the same owner and epoch again is harmless. Undecided after every attempt is
        # not "lost": Cassandra did not answer, and the caller retries while the lease is surely still ours.
        self._settle("renewal of the lease", self._renew, (_ttl(ttl_s), owner, self.topology_id, owner, epoch),
                     lambda row: self._fenced(row, epoch), lambda: AGAIN, kind="lease")

    def release_lease(self, owner: str, epoch: int) -> None:
        """Give the lease up; a no-op when it is no longer ours. Raises :class:`LwtUndecidedError` when Cassandra
        never told whether it was released: the lease then expires with its TTL."""
        self._settle("release of the lease", self._release, (self.topology_id, owner, epoch),
                     lambda _: None, lambda: AGAIN, kind="lease")  # not applied: no longer ours, nothing to do

    def lease_info(self) -> LeaseInfo | None:
        """The current holder: the static columns, with the owner cell's remaining TTL as the expiry."""
        row = self.client.run_one(self._lease_ttl, (self.topology_id,), kind="read", metrics=self.metrics).one()
        if row is None or row["owner"] is None or row["epoch"] is None:
            return None
        ttl = row["owner_ttl"]
        return LeaseInfo(row["owner"], row["epoch"], None if ttl is None else time.time() + ttl)

    # helpers
    def _settle(self, what: str, statement: Statement, values: Sequence[object] | None,
                answered: Callable[[Row], Again | None], resolve: Callable[[], Again | None], *,
                kind: str = "cas") -> None:
        """Send one conditional write until it is decided (:func:`states.cassandra.lwt.settle`)."""
        settle(f"{what} for topology {self.topology_id!r}", lambda: self._send(statement, values, kind=kind),
               answered, resolve, attempts=_ATTEMPTS, pause=self._pause)

    def _pause(self, retry: int) -> None:
        """Back off before retry number ``retry`` (an unknown outcome or a lost race)."""
        s = self.settings
        time.sleep(backoff_s(retry, s.backoff_initial_s, s.backoff_max_s))

    def _send(self, statement: Statement, values: Sequence[object] | None, *, kind: str) -> Row:
        """The LWT's answer row; its failure raised as the driver reported it."""
        result = self.client.run([(statement, values)], kind=kind, metrics=self.metrics, lwt=True)[0]
        if isinstance(result, BaseException):
            raise result
        return result.one()

    def _fenced(self, row: Row, epoch: int) -> None:
        """Nothing when the write under ``epoch`` applied; LeaseLostError when a newer epoch fenced it out."""
        if not row["[applied]"]:
            raise LeaseLostError(self.topology_id, epoch, row.get("epoch"))

    def _check_epoch(self, epoch: int) -> None:
        """LeaseLostError unless ``epoch`` is still the current one (a serial read)."""
        _, current = self._serial_lease()
        if current != epoch:
            raise LeaseLostError(self.topology_id, epoch, current)

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
        msg = "lease ttl must be positive"
        raise ValueError(msg)
    return max(1, math.ceil(ttl_s))
