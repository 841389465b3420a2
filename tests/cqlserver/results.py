"""RESULT message kinds (spec 4.2.5) and their wire encoding for v4 and v5."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .types import ColumnSpec
from .wire import Writer

KIND_VOID = 0x0001
KIND_ROWS = 0x0002
KIND_SET_KEYSPACE = 0x0003
KIND_PREPARED = 0x0004
KIND_SCHEMA_CHANGE = 0x0005

FLAG_GLOBAL_TABLES_SPEC = 0x0001
FLAG_HAS_MORE_PAGES = 0x0002
FLAG_NO_METADATA = 0x0004
FLAG_METADATA_CHANGED = 0x0008


@dataclass
class Void:
    pass


@dataclass
class SetKeyspace:
    keyspace: str


@dataclass
class SchemaChange:
    change: str  # CREATED | UPDATED | DROPPED
    target: str  # KEYSPACE | TABLE
    keyspace: str
    name: str | None = None

    def write(self, w: Writer) -> None:
        w.string(self.change).string(self.target).string(self.keyspace)
        if self.target != "KEYSPACE":
            w.string(self.name or "")


@dataclass
class Rows:
    columns: list[ColumnSpec]
    rows: list[list[Any]] = field(default_factory=list)
    paging_state: bytes | None = None
    metadata_id: bytes | None = None  # v5 id to report; default: digest of `columns`


def rows_as_dicts(result: Rows) -> list[dict[str, Any]]:
    """Rows as {column: value} with values as the driver would return them."""
    return [{c.name: (None if v is None else c.type.to_python(v)) for c, v in zip(result.columns, row, strict=False)}
            for row in result.rows]


@dataclass
class Prepared:
    id: bytes
    variables: list[ColumnSpec]
    pk_indexes: list[int]
    result_columns: list[ColumnSpec] | None  # None: statement returns no rows metadata


Result = Void | SetKeyspace | SchemaChange | Rows | Prepared


def metadata_id(columns: list[ColumnSpec] | None) -> bytes:
    """v5 result_metadata_id: a digest of the result column specs."""
    digest = hashlib.md5()
    for col in columns or []:
        digest.update(f"{col.keyspace}.{col.table}.{col.name}:{col.type.name};".encode())
    return digest.digest()


def _write_specs(w: Writer, columns: list[ColumnSpec]) -> None:
    """Column specs, with a global table spec when they all share one table."""
    tables = {(c.keyspace, c.table) for c in columns}
    glob = len(tables) == 1
    if glob:
        ks, table = next(iter(tables))
        w.string(ks).string(table)
    for col in columns:
        if not glob:
            w.string(col.keyspace).string(col.table)
        w.string(col.name)
        col.type.write_option(w)


def _specs_flag(columns: list[ColumnSpec]) -> int:
    return FLAG_GLOBAL_TABLES_SPEC if len({(c.keyspace, c.table) for c in columns}) == 1 else 0


def _write_rows_metadata(w: Writer, columns: list[ColumnSpec], paging_state: bytes | None,
                         no_metadata: bool, new_metadata_id: bytes | None) -> None:
    flags = 0
    if paging_state is not None:
        flags |= FLAG_HAS_MORE_PAGES
    if no_metadata:
        flags |= FLAG_NO_METADATA
    else:
        flags |= _specs_flag(columns)
        if new_metadata_id is not None:
            flags |= FLAG_METADATA_CHANGED
    w.int(flags).int(len(columns))
    if paging_state is not None:
        w.bytes(paging_state)
    if no_metadata:
        return
    if new_metadata_id is not None:
        w.short_bytes(new_metadata_id)
    _write_specs(w, columns)


def encode_result(result: Result, protocol_version: int, skip_metadata: bool = False,
                  request_metadata_id: bytes | None = None) -> bytes:
    """Body of a RESULT message.

    `skip_metadata` honours the EXECUTE Skip_metadata flag; in v5 a changed
    result_metadata_id forces full metadata plus Metadata_changed.
    """
    w = Writer()
    if isinstance(result, Void):
        w.int(KIND_VOID)
    elif isinstance(result, SetKeyspace):
        w.int(KIND_SET_KEYSPACE).string(result.keyspace)
    elif isinstance(result, SchemaChange):
        w.int(KIND_SCHEMA_CHANGE)
        result.write(w)
    elif isinstance(result, Rows):
        w.int(KIND_ROWS)
        new_id = None
        no_meta = skip_metadata
        if protocol_version >= 5 and request_metadata_id is not None:
            current = result.metadata_id or metadata_id(result.columns)
            if current != request_metadata_id:
                new_id, no_meta = current, False
        _write_rows_metadata(w, result.columns, result.paging_state, no_meta, new_id)
        w.int(len(result.rows))
        for row in result.rows:
            for col, value in zip(result.columns, row, strict=False):
                w.bytes(None if value is None else col.type.encode(value))
    elif isinstance(result, Prepared):
        w.int(KIND_PREPARED).short_bytes(result.id)
        if protocol_version >= 5:
            w.short_bytes(metadata_id(result.result_columns))
        w.int(_specs_flag(result.variables)).int(len(result.variables))
        w.int(len(result.pk_indexes))
        for idx in result.pk_indexes:
            w.short(idx)
        if result.variables:
            _write_specs(w, result.variables)
        if result.result_columns is None:
            w.int(FLAG_NO_METADATA).int(0)
        else:
            _write_rows_metadata(w, result.result_columns, None, False, None)
    else:  # pragma: no cover
        raise TypeError(result)
    return w.getvalue()
