"""The database: catalog + table data + prepared statements, behind one lock.

`Engine` executes parsed statements and protocol BATCHes and knows nothing of
sockets; the server layer adds framing, auth, faults and counting on top. One
re-entrant lock serialises all reads and writes, which makes every LWT
trivially linearizable (and SERIAL reads trivially up to date).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import ddl
from .binding import Bindings, Variable, collect_variables, decode_values, partition_key_indexes, resolve_table
from .cql import ast, parse
from .errors import InvalidRequest, UnpreparedError
from .lwt import execute_cas
from .reads import ReadOptions, _selection, execute_select
from .results import Prepared, Result, Rows, SchemaChange, Void, rows_as_dicts
from .schema import Catalog, Table
from .storage import Cell, Clock, Row, TableData
from .system_tables import NodeInfo, install, is_system_keyspace
from .types import BIGINT
from .wire import SERIAL_CONSISTENCIES
from .writes import WritePlan, apply_write, plan_write

STATEMENT_KINDS = {ast.Select: "select", ast.Insert: "insert", ast.Update: "update", ast.Delete: "delete",
                   ast.Batch: "batch", ast.Use: "use"}


@dataclass
class ExecOptions:
    """Per-request parameters from QUERY/EXECUTE/BATCH."""

    consistency: str = "ONE"
    serial_consistency: str | None = None
    page_size: int | None = None
    paging_state: bytes | None = None
    timestamp: int | None = None  # client default timestamp, microseconds


@dataclass(frozen=True)
class StatementInfo:
    """What a request touches: used for fault matching and statistics."""

    kind: str  # select|insert|update|delete|batch|ddl|use
    tables: tuple[str, ...]  # "keyspace.table"
    conditional: bool
    system: bool
    members: tuple[str, ...] = ()  # table of each statement of a batch, in order


@dataclass
class PreparedStatement:
    id: bytes
    query: str
    keyspace: str | None
    parsed: ast.Parsed
    variables: list[Variable]
    result: Prepared


@dataclass
class BatchItem:
    parsed: ast.Parsed
    raw_values: list[Any]
    variables: list[Variable] | None = None


@dataclass
class Engine:
    node: NodeInfo = field(default_factory=NodeInfo)
    clock: Clock = field(default_factory=Clock)

    def __post_init__(self) -> None:
        self.catalog = Catalog()
        install(self.catalog, self.node)
        self.data: dict[tuple[str, str], TableData] = {}
        self.lock = threading.RLock()
        self.prepared: dict[bytes, PreparedStatement] = {}
        self._parse_cache: OrderedDict[str, ast.Parsed] = OrderedDict()
        self._parse_lock = threading.Lock()
        self.schema_listeners: list[Callable[[SchemaChange], None]] = []

    # -- parsing and description --------------------------------------------
    def parse(self, query: str) -> ast.Parsed:
        with self._parse_lock:
            cached = self._parse_cache.get(query)
        if cached is None:
            cached = parse(query)
            with self._parse_lock:
                self._parse_cache[query] = cached
                if len(self._parse_cache) > 2048:
                    self._parse_cache.popitem(last=False)
        return cached

    def describe(self, parsed: ast.Parsed, keyspace: str | None) -> StatementInfo:
        stmt = parsed.statement
        kind = STATEMENT_KINDS.get(type(stmt), "ddl")
        names: list[ast.TableName] = []
        conditional = False
        if isinstance(stmt, ast.Batch):
            names = [s.table for s in stmt.statements]
            conditional = any(_is_conditional(s) for s in stmt.statements)
        elif isinstance(stmt, (ast.Select, ast.Insert, ast.Update, ast.Delete, ast.CreateTable,
                               ast.DropTable, ast.Truncate)):
            names = [stmt.table]
            conditional = _is_conditional(stmt)
        members = tuple(f"{n.keyspace or keyspace}.{n.name}" for n in names)
        tables = tuple(dict.fromkeys(members))
        if isinstance(stmt, ast.Use):
            system = True
        elif isinstance(stmt, (ast.CreateKeyspace, ast.DropKeyspace)):
            system = False
        else:
            system = bool(tables) and all(is_system_keyspace(t.split(".", 1)[0]) for t in tables)
        return StatementInfo(kind, tables, conditional, system, members)

    # -- prepared statements ---------------------------------------------------
    def prepare(self, query: str, keyspace: str | None) -> PreparedStatement:
        parsed = self.parse(query)
        with self.lock:
            variables = collect_variables(parsed, self.catalog, keyspace)
            stmt = parsed.statement
            table = None
            result_columns = None
            if isinstance(stmt, (ast.Select, ast.Insert, ast.Update, ast.Delete)):
                table = resolve_table(self.catalog, stmt.table, keyspace)
            if isinstance(stmt, ast.Select):
                assert table is not None
                result_columns = _selection(stmt, table, self.clock.now()).specs
            qualified = isinstance(stmt, (ast.Select, ast.Insert, ast.Update, ast.Delete)) and \
                stmt.table.keyspace is not None
            digest_input = query if qualified or keyspace is None else keyspace + query
            prepared_id = hashlib.md5(digest_input.encode("utf-8")).digest()
            result = Prepared(prepared_id, [v.spec for v in variables],
                              partition_key_indexes(variables, table), result_columns)
            entry = PreparedStatement(prepared_id, query, keyspace, parsed, variables, result)
            self.prepared[prepared_id] = entry
            return entry

    def lookup(self, prepared_id: bytes) -> PreparedStatement:
        entry = self.prepared.get(prepared_id)
        if entry is None:
            raise UnpreparedError(prepared_id)
        return entry

    # -- execution ---------------------------------------------------------
    def execute(self, parsed: ast.Parsed, keyspace: str | None, raw_values: list[Any],
                opts: ExecOptions, names: list[str] | None = None,
                variables: list[Variable] | None = None) -> Result:
        """Run one statement; raw_values are wire bytes (None = null, UNSET)."""
        stmt = parsed.statement
        with self.lock:
            if variables is None:
                variables = collect_variables(parsed, self.catalog, keyspace) if parsed.marker_count else []
            bindings = Bindings(decode_values(variables, raw_values, names))
            now = self.clock.now()
            if isinstance(stmt, ast.Select):
                table = resolve_table(self.catalog, stmt.table, keyspace)
                read = ReadOptions(opts.consistency, now, opts.page_size, opts.paging_state)
                return execute_select(stmt, table, self._data_for_read(table), bindings, read)
            if isinstance(stmt, (ast.Insert, ast.Update, ast.Delete)):
                table = resolve_table(self.catalog, stmt.table, keyspace)
                self._check_writable(table)
                plan = plan_write(stmt, table, bindings, opts.timestamp)
                return self._write([plan], opts, now, is_batch=False)
            if isinstance(stmt, ast.Batch):
                return self._cql_batch(stmt, keyspace, bindings, opts, now)
            return self._schema(stmt, keyspace)

    def execute_batch(self, items: list[BatchItem], batch_type: str, keyspace: str | None,
                      opts: ExecOptions) -> Result:
        """The BATCH protocol message: prepared ids and/or query strings with values."""
        with self.lock:
            now = self.clock.now()
            plans = []
            if batch_type == "COUNTER":
                raise InvalidRequest("Counter batches are not supported by this test server")
            for item in items:
                stmt = item.parsed.statement
                if not isinstance(stmt, (ast.Insert, ast.Update, ast.Delete)):
                    raise InvalidRequest("Invalid statement in batch: only UPDATE, INSERT and DELETE statements "
                                         "are allowed.")
                variables = item.variables
                if variables is None:
                    variables = collect_variables(item.parsed, self.catalog, keyspace)
                bindings = Bindings(decode_values(variables, item.raw_values))
                table = resolve_table(self.catalog, stmt.table, keyspace)
                self._check_writable(table)
                plans.append(plan_write(stmt, table, bindings, opts.timestamp))
            return self._write(plans, opts, now, is_batch=True)

    def _cql_batch(self, stmt: ast.Batch, keyspace: str | None, bindings: Bindings, opts: ExecOptions,
                   now: float) -> Result:
        if stmt.kind == "COUNTER":
            raise InvalidRequest("Counter batches are not supported by this test server")
        timestamp = opts.timestamp
        if stmt.timestamp is not None:
            value = bindings.value(stmt.timestamp, BIGINT)
            timestamp = value if isinstance(value, int) else timestamp
        plans = []
        for sub in stmt.statements:
            table = resolve_table(self.catalog, sub.table, keyspace)
            self._check_writable(table)
            plan = plan_write(sub, table, bindings, timestamp)
            plan.custom_timestamp = plan.custom_timestamp or stmt.timestamp is not None
            plans.append(plan)
        return self._write(plans, opts, now, is_batch=True)

    def _write(self, plans: list[WritePlan], opts: ExecOptions, now: float, is_batch: bool) -> Result:
        if not plans:
            return Void()
        conditional = any(p.conditional for p in plans)
        if conditional:
            serial = opts.serial_consistency or "SERIAL"
            if serial not in SERIAL_CONSISTENCIES:
                raise InvalidRequest(f"Invalid consistency for conditional update: {serial}, "
                                     "must be one of SERIAL or LOCAL_SERIAL")
            if opts.consistency in SERIAL_CONSISTENCIES:
                raise InvalidRequest(f"{opts.consistency} is not supported as conditional update commit "
                                     "consistency. Use ANY if you mean \"make sure it is accepted but I don't "
                                     'care how many replicas commit it for non-SERIAL reads"')
            data = self.table_data(plans[0].table)
            _, rows = execute_cas(plans, data, now, is_batch)
            return rows
        if opts.consistency in SERIAL_CONSISTENCIES:
            raise InvalidRequest("You must use conditional updates for serializable writes")
        for plan in plans:
            apply_write(plan, self.table_data(plan.table), now)
        return Void()

    def _schema(self, stmt: ast.Statement, keyspace: str | None) -> Result:
        result: Result
        if isinstance(stmt, ast.Use):
            return ddl.use(self.catalog, stmt)
        if isinstance(stmt, ast.CreateKeyspace):
            result = ddl.create_keyspace(self.catalog, stmt)
        elif isinstance(stmt, ast.DropKeyspace):
            result = ddl.drop_keyspace(self.catalog, stmt)
            if isinstance(result, SchemaChange):
                for key in [k for k in self.data if k[0] == stmt.name]:
                    del self.data[key]
        elif isinstance(stmt, ast.CreateTable):
            result, _ = ddl.create_table(self.catalog, stmt, keyspace)
        elif isinstance(stmt, ast.DropTable):
            result, dropped = ddl.drop_table(self.catalog, stmt, keyspace)
            if dropped is not None:
                self.data.pop((dropped.keyspace, dropped.name), None)
        elif isinstance(stmt, ast.Truncate):
            table = resolve_table(self.catalog, stmt.table, keyspace)
            self._check_writable(table)
            self.table_data(table).truncate()
            return Void()
        else:  # pragma: no cover
            raise InvalidRequest(f"Unsupported statement {type(stmt).__name__}")
        if isinstance(result, SchemaChange):
            if isinstance(stmt, (ast.DropTable, ast.DropKeyspace)):
                self.prepared.clear()  # Cassandra evicts statements of dropped tables too
            for listener in list(self.schema_listeners):
                listener(result)
        return result

    # -- data access -----------------------------------------------------------
    def table_data(self, table: Table) -> TableData:
        key = (table.keyspace, table.name)
        data = self.data.get(key)
        if data is None or data.table is not table:
            data = self.data[key] = TableData(table)
        return data

    def _data_for_read(self, table: Table) -> TableData:
        if table.provider is None:
            return self.table_data(table)
        data = TableData(table)
        for row in table.provider():
            _load_row(data, table, row)
        return data

    @staticmethod
    def _check_writable(table: Table) -> None:
        if table.provider is not None:
            raise InvalidRequest(f"Modification of system table {table.qualified} is not allowed by this test server")

    def rows(self, keyspace: str, table_name: str) -> list[dict[str, Any]]:
        """Live rows of a table as dicts (SELECT * order), for test assertions."""
        with self.lock:
            self.catalog.table(keyspace, table_name)
            parsed = self.parse(f'SELECT * FROM "{keyspace}"."{table_name}"')
            result = self.execute(parsed, keyspace, [], ExecOptions())
            assert isinstance(result, Rows)
            return rows_as_dicts(result)

    def truncate_all(self) -> None:
        with self.lock:
            for data in self.data.values():
                data.truncate()


def _is_conditional(stmt: ast.Statement) -> bool:
    if isinstance(stmt, ast.Insert):
        return stmt.if_not_exists
    if isinstance(stmt, (ast.Update, ast.Delete)):
        return stmt.if_exists or bool(stmt.conditions)
    return False


def _load_row(data: TableData, table: Table, row: dict[str, Any]) -> None:
    pk = tuple(table.columns[c.name].type.coerce(row[c.name]) for c in table.partition_key)
    ck = tuple(row[c.name] for c in table.clustering)
    part = data.get_or_create(pk)
    stored = part.rows.setdefault(ck, Row(marker=Cell(True)))
    for name, value in row.items():
        col = table.columns.get(name)
        if col is not None and not col.is_primary_key and value is not None:
            stored.cells[name] = Cell(col.type.coerce(value))


