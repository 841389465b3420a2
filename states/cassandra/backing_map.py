"""CassandraBackingMap: stored values in a typed Cassandra table, every write a lightweight transaction."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from cassandra import InvalidRequest
from cassandra.cluster import ResultSet
from cassandra.query import PreparedStatement

from states.cassandra.batches import cas_by_shard
from states.cassandra.pipe import CassandraPipe
from states.cassandra.retry import Decision, decide
from states.cassandra.schema import TableShape, ensure_table, schema_agreed, shards_in_use, table_exists
from states.cassandra.session import TUPLES, CassandraClient, shared_client
from states.cassandra.settings import CassandraSettings
from states.cassandra.shards import sharded
from states.cassandra.unknown import resolve
from states.errors import CommitProtocolError, RowRefusedError, StateTableMissingError
from states.layout import Row, RowLayout
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import CasResult
from states.spec import MapSpec


class CassandraBackingMap:
    """Stored values of one :class:`MapSpec` in ``<keyspace>.<table>``, with compare-and-set.

    The table has the key columns as a composite partition key, then ``txid``, the value columns
    and, for opaque state, ``prev_<value>``: plain rows for cqlsh. Round trips per key:

    * ``multi_get``: one SELECT per distinct key (token-aware, concurrent, retried);
    * ``multi_cas``: one LWT per key, ``INSERT ... IF NOT EXISTS`` when nothing is expected, else
      ``UPDATE ... IF`` every stored column equals what was read (nulls included). A failed LWT
      returns the current row, which is decoded and returned: no re-read. An unknown outcome
      costs one serial read (``states.cassandra.unknown``).

    Under ``CasCachedMap`` the read is skipped for cached keys (a stale entry only costs a failed
    LWT, which carries the current row) and for keys guessed new (``INSERT ... IF NOT EXISTS``
    first): the warm steady state and new keys are one request per key.
    Pickles as settings and spec; an executor reconnects through its process's shared client.

    The table is created if absent only with ``create`` (nothing committed into it yet); otherwise a
    missing table is :class:`~states.errors.StateTableMissingError`, and so is a request that the
    server refuses as invalid (``InvalidRequest``, by type) once the table is gone; a refusal on a table
    that is there is :class:`~states.errors.RowRefusedError`. Both are permanent, never retried.
    """

    def __init__(self, settings: CassandraSettings, spec: MapSpec, *, client: CassandraClient | None = None,
                 metrics: StateMetrics = STATE_METRICS, create: bool = True, committed_txid: int = 0) -> None:
        self.settings, self.spec, self.metrics = settings, spec, metrics
        self.create, self.committed_txid = create, committed_txid
        self.client = client or shared_client(settings)
        self._layout = layout = RowLayout(spec)
        self.shards = shards_in_use(self.client, settings.keyspace, spec.table, settings.shards, metrics)
        self._shape = shape = TableShape.of(settings.keyspace, layout, self.shards)
        ensure_table(self.client, shape, metrics, create=create, committed_txid=committed_txid)
        self._stored = [n for n, _ in layout.stored_columns]
        self._keys = shape.key_columns  # the shard first when sharded
        names = [n for n, _ in shape.columns]
        where = " AND ".join(f"{n} = ?" for n in self._keys)
        select = f"SELECT {', '.join(self._stored)} FROM {shape.name} WHERE {where}"
        insert = f"INSERT INTO {shape.name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        ttl = "" if spec.ttl_s is None else f" USING TTL {int(spec.ttl_s)}"  # every write restarts the key's clock
        prepare = self.client.prepare
        self._select = prepare(select, idempotent=True)
        # a shard's rows by their key columns (each IN'd), for one serial read of a conditional batch's rows
        self._select_shard = None if not self.shards else prepare(
            f"SELECT {', '.join(self._keys)}, {', '.join(self._stored)} FROM {shape.name} WHERE "
            f"{self._keys[0]} = ? AND " + " AND ".join(f"{n} IN ?" for n in self._keys[1:]), idempotent=True)
        self._put = prepare(insert + ttl, idempotent=True)
        self._insert_if_absent = prepare(insert + " IF NOT EXISTS" + ttl, idempotent=False)
        self._update_if = prepare(f"UPDATE {shape.name}{ttl} SET {', '.join(f'{n} = ?' for n in self._stored)} "
                                  f"WHERE {where} IF {' AND '.join(f'{n} = ?' for n in self._stored)}",
                                  idempotent=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "spec": self.spec, "create": self.create,
                "committed_txid": self.committed_txid}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickling re-runs __init__ so connections are reopened here (mypy flags calls of __init__ on an instance).
        self.__init__(state["settings"], state["spec"], create=state.get("create", True),  # type: ignore[misc]
                      committed_txid=state.get("committed_txid", 0))

    def refused(self, error: BaseException, key: Row | None = None) -> BaseException:
        """The typed error of a request the server refused as invalid (``InvalidRequest``): the table is gone
        (:class:`StateTableMissingError`; asked of the schema tables, never read from the message) or it
        refused the row (:class:`RowRefusedError`). Any other error is returned as it is, and so is this one while
        the nodes disagree on the schema (a table still spreading to a node is no loss): it is retried."""
        if not isinstance(error, InvalidRequest) or not schema_agreed(self.client):
            return error
        if not table_exists(self.client, self._shape, self.metrics):
            self.client.validated_tables.discard(self._shape)  # a later open checks again, and never creates it
            return StateTableMissingError(self._shape.name)
        return RowRefusedError(self._shape.name, key, " ".join(str(error).split())[:300])

    def key_row(self, key: Hashable) -> Row:
        """The primary key's values of ``key``: its shard first when the table is sharded."""
        return sharded(self._layout.key_row(key), self.shards)

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        key_rows = [self.key_row(k) for k in keys]
        unique = list(dict.fromkeys(key_rows))
        try:
            results = self.client.run([(self._select, kr) for kr in unique], kind="read", metrics=self.metrics,
                                      profile=TUPLES)
        except InvalidRequest as e:
            raise self.refused(e) from e
        found = dict(zip(unique, (self.decode_read(self._ok(rs, kr)) for rs, kr in zip(results, unique, strict=True)),
                         strict=True))
        return [found[kr] for kr in key_rows]

    def multi_put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        """Unconditional upserts, e.g. to seed a table; the map states write with :meth:`multi_cas`."""
        rows = [self.key_row(k) + self._value_row(v) for k, v in zip(keys, values, strict=True)]
        try:
            results = self.client.run([(self._put, r) for r in rows], kind="write", metrics=self.metrics)
        except InvalidRequest as e:
            raise self.refused(e) from e
        width = len(self._keys)
        for rs, r in zip(results, rows, strict=True):
            self._ok(rs, r[:width])

    def multi_cas(self, keys: Sequence[Hashable], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        """One LWT per key conditioned on ``expected`` (None: absent), or one conditional batch per shard of a
        sharded table (:mod:`states.cassandra.batches`); unknown outcomes resolved."""
        if self.shards:
            try:
                return cas_by_shard(self, keys, expected, values)
            except InvalidRequest as e:
                raise self.refused(e) from e
        requests = [self.cas_request(k, e, v) for k, e, v in zip(keys, expected, values, strict=True)]
        try:
            results = self.client.run([(stmt, row) for stmt, row, _, _ in requests], kind="cas",
                                      metrics=self.metrics, lwt=True, profile=TUPLES)
        except InvalidRequest as e:
            raise self.refused(e) from e
        out: list[CasResult[Any] | None] = [None] * len(keys)
        unknown = []
        for i, rs in enumerate(results):
            if isinstance(rs, BaseException):
                if decide(rs, lwt=True) is not Decision.RESOLVE:
                    raise rs
                unknown.append(i)
                continue
            out[i] = self.decode_cas(rs)
        if unknown:
            resolved = resolve(self.client, self._select, [requests[i][2] for i in unknown],
                               [requests[i][3] for i in unknown], self._stored, metrics=self.metrics)
            for i, (applied, current) in zip(unknown, resolved, strict=True):
                out[i] = CasResult(True) if applied else CasResult(False, self._layout.value_of(current))
        done = [r for r in out if r is not None]
        if len(done) != len(out):
            msg = "a compare-and-set was neither answered nor resolved"
            raise CommitProtocolError(msg)
        return done

    def open_pipe(self) -> CassandraPipe | None:
        """Reads and LWTs of one ``cas_update`` through one window (:mod:`states.cassandra.pipe`); None for a
        sharded table, whose compare-and-sets go out together, a batch per shard (:meth:`multi_cas`)."""
        return None if self.shards else CassandraPipe(self)

    # -- requests and answers, shared with the pipe --------------------------------------------

    @property
    def select(self) -> PreparedStatement:
        """The SELECT of a key's stored columns, in stored-column order."""
        return self._select

    @property
    def select_shard(self) -> PreparedStatement:
        """The SELECT of a sharded table's rows by shard and each key column IN a list: key columns, then the
        stored columns (bound by :meth:`shard_read_values`)."""
        if self._select_shard is None:
            msg = f"table {self.spec.table} is not sharded"
            raise TypeError(msg)
        return self._select_shard

    def shard_read_values(self, key_rows: Sequence[Row]) -> tuple[Any, ...]:
        """The values of :attr:`select_shard` reading ``key_rows`` (of one shard): the shard, then each key column's
        distinct values. A composite key reads the product of its columns' values, a superset of ``key_rows``."""
        return (key_rows[0][0], *(list(dict.fromkeys(kr[i] for kr in key_rows)) for i in range(1, len(key_rows[0]))))

    def read_request(self, key: Hashable) -> tuple[PreparedStatement, Row]:
        """The SELECT of ``key``'s stored columns, and its key row."""
        return self._select, self.key_row(key)

    def cas_request(self, key: Hashable, expected: Any, value: Any) -> tuple[PreparedStatement, Row, Row, Row]:
        """``(statement, values, key row, stored row wanted)`` of the LWT writing ``value`` over ``expected``."""
        kr, wanted = self.key_row(key), self._value_row(value)
        old = self._layout.value_row(expected)
        if old is None:
            return self._insert_if_absent, kr + wanted, kr, wanted
        return self._update_if, wanted + kr + old, kr, wanted

    def decode_read(self, rs: ResultSet) -> Any:
        """The stored value a SELECT returned (None: absent)."""
        row = rs.one()
        return self._layout.value_of(None if row is None else tuple(row))

    def decode_cas(self, rs: ResultSet) -> CasResult[Any]:
        """Applied, or not applied with the current value the failed LWT returned."""
        row = rs.one()
        return CasResult(True) if row[0] else CasResult(False, self._layout.value_of(self._lwt_row(rs, row)))

    @property
    def stored_columns(self) -> list[str]:
        """The stored columns (``txid``, values, ``prev_`` values), in the order of a stored row."""
        return self._stored

    def stored_row(self, value: Any) -> Row | None:
        """The stored columns of ``value`` (None: absent), as a compare-and-set is conditioned on them."""
        return self._layout.value_row(value)

    def rows_returned(self, rs: ResultSet) -> dict[Row, Row]:
        """The stored rows a conditional batch that did not apply returned, by key row (absent rows: none)."""
        at = {c: i for i, c in enumerate(rs.column_names)}
        if any(c not in at for c in self._keys):  # no row of the batch exists: only ``[applied]`` came back
            return {}
        keys, stored = [at[c] for c in self._keys], [at.get(c) for c in self._stored]
        return {tuple(row[i] for i in keys): tuple(None if i is None else row[i] for i in stored) for row in rs}

    def value_of_row(self, row: Row | None) -> Any:
        """The stored value of a row of stored columns (None: absent)."""
        return self._layout.value_of(row)

    def _value_row(self, value: Any) -> Row:
        row = self._layout.value_row(value)
        if row is None:
            msg = f"table {self.spec.table}: cannot store None (a None value reads as absent)"
            raise ValueError(msg)
        return row

    def _ok(self, result: ResultSet | BaseException, key: Row) -> ResultSet:
        if isinstance(result, BaseException):
            typed = self.refused(result, key)
            if typed is result:
                raise result
            raise typed from result
        return result

    def _lwt_row(self, rs: ResultSet, row: tuple[Any, ...]) -> Row | None:
        """The stored columns a failed LWT returned (absent row: only ``[applied]`` comes back)."""
        at = {c: i for i, c in enumerate(rs.column_names)}
        if not any(c in at for c in self._stored):
            return None
        return tuple(row[at[c]] if c in at else None for c in self._stored)

