"""Request message bodies (spec 4.1) decoded for v4 and v5, and simple responses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ProtocolError
from .results import SchemaChange
from .wire import Reader, Writer

OP_ERROR = 0x00
OP_STARTUP = 0x01
OP_READY = 0x02
OP_AUTHENTICATE = 0x03
OP_OPTIONS = 0x05
OP_SUPPORTED = 0x06
OP_QUERY = 0x07
OP_RESULT = 0x08
OP_PREPARE = 0x09
OP_EXECUTE = 0x0A
OP_REGISTER = 0x0B
OP_EVENT = 0x0C
OP_BATCH = 0x0D
OP_AUTH_CHALLENGE = 0x0E
OP_AUTH_RESPONSE = 0x0F
OP_AUTH_SUCCESS = 0x10

OPCODE_NAMES = {OP_STARTUP: "STARTUP", OP_OPTIONS: "OPTIONS", OP_QUERY: "QUERY", OP_PREPARE: "PREPARE",
                OP_EXECUTE: "EXECUTE", OP_REGISTER: "REGISTER", OP_BATCH: "BATCH",
                OP_AUTH_RESPONSE: "AUTH_RESPONSE"}

_VALUES = 0x01
_SKIP_METADATA = 0x02
_PAGE_SIZE = 0x04
_PAGING_STATE = 0x08
_SERIAL_CONSISTENCY = 0x10
_DEFAULT_TIMESTAMP = 0x20
_NAMES_FOR_VALUES = 0x40
_WITH_KEYSPACE = 0x80
_NOW_IN_SECONDS = 0x100

BATCH_TYPES = {0: "LOGGED", 1: "UNLOGGED", 2: "COUNTER"}


@dataclass
class QueryParameters:
    consistency: str
    values: list[Any] = field(default_factory=list)
    names: list[str] | None = None
    skip_metadata: bool = False
    page_size: int | None = None
    paging_state: bytes | None = None
    serial_consistency: str | None = None
    timestamp: int | None = None
    keyspace: str | None = None


def _flags(r: Reader, version: int) -> int:
    return r.uint() if version >= 5 else r.byte()


def read_query_parameters(r: Reader, version: int) -> QueryParameters:
    params = QueryParameters(r.consistency())
    flags = _flags(r, version)
    if flags & _VALUES:
        names: list[str] = []
        for _ in range(r.short()):
            if flags & _NAMES_FOR_VALUES:
                names.append(r.string().lower())
            params.values.append(r.value())
        params.names = names if flags & _NAMES_FOR_VALUES else None
    params.skip_metadata = bool(flags & _SKIP_METADATA)
    if flags & _PAGE_SIZE:
        params.page_size = r.int()
    if flags & _PAGING_STATE:
        params.paging_state = r.bytes()
    if flags & _SERIAL_CONSISTENCY:
        params.serial_consistency = r.consistency()
    if flags & _DEFAULT_TIMESTAMP:
        params.timestamp = r.long()
    if version >= 5 and flags & _WITH_KEYSPACE:
        params.keyspace = r.string()
    if version >= 5 and flags & _NOW_IN_SECONDS:
        r.int()
    return params


@dataclass
class QueryRequest:
    query: str
    params: QueryParameters


@dataclass
class PrepareRequest:
    query: str
    keyspace: str | None = None


@dataclass
class ExecuteRequest:
    prepared_id: bytes
    result_metadata_id: bytes | None
    params: QueryParameters


@dataclass
class BatchEntry:
    query: str | None
    prepared_id: bytes | None
    values: list[Any]


@dataclass
class BatchRequest:
    batch_type: str
    entries: list[BatchEntry]
    consistency: str
    serial_consistency: str | None = None
    timestamp: int | None = None
    keyspace: str | None = None


def decode_query(r: Reader, version: int) -> QueryRequest:
    return QueryRequest(r.long_string(), read_query_parameters(r, version))


def decode_prepare(r: Reader, version: int) -> PrepareRequest:
    req = PrepareRequest(r.long_string())
    if version >= 5 and r.remaining() and r.uint() & 0x01:
        req.keyspace = r.string()
    return req


def decode_execute(r: Reader, version: int) -> ExecuteRequest:
    prepared_id = r.short_bytes()
    metadata_id = r.short_bytes() if version >= 5 else None
    return ExecuteRequest(prepared_id, metadata_id, read_query_parameters(r, version))


def decode_batch(r: Reader, version: int) -> BatchRequest:
    type_code = r.byte()
    if type_code not in BATCH_TYPES:
        raise ProtocolError(f"Invalid BATCH message type {type_code}")
    entries = []
    for _ in range(r.short()):
        kind = r.byte()
        if kind == 0:
            query, prepared_id = r.long_string(), None
        elif kind == 1:
            query, prepared_id = None, r.short_bytes()
        else:
            raise ProtocolError(f"Invalid query kind in BATCH messages. Must be 0 or 1 but got {kind}")
        values = [r.value() for _ in range(r.short())]
        entries.append(BatchEntry(query, prepared_id, values))
    req = BatchRequest(BATCH_TYPES[type_code], entries, r.consistency())
    flags = _flags(r, version)
    if flags & _NAMES_FOR_VALUES:
        raise ProtocolError("Names for values are not supported in BATCH (CASSANDRA-10246)")
    if flags & _SERIAL_CONSISTENCY:
        req.serial_consistency = r.consistency()
    if flags & _DEFAULT_TIMESTAMP:
        req.timestamp = r.long()
    if version >= 5 and flags & _WITH_KEYSPACE:
        req.keyspace = r.string()
    return req


def supported_body(cql_version: str, protocol_versions: tuple[int, ...]) -> bytes:
    versions = [f"{v}/v{v}" for v in sorted(protocol_versions)]
    return Writer().string_multimap({
        "CQL_VERSION": [cql_version],
        "COMPRESSION": [],
        "PROTOCOL_VERSIONS": versions,
    }).getvalue()


def schema_change_event_body(change: SchemaChange) -> bytes:
    w = Writer().string("SCHEMA_CHANGE")
    change.write(w)
    return w.getvalue()
