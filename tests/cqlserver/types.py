"""CQL data types: parsing type names, wire (de)serialisation, literals, ordering.

Values are kept as plain Python objects in storage: str, int, float, bool,
bytes, uuid.UUID, decimal.Decimal; `timestamp` is an int of milliseconds since
the epoch, `date` an int of days since the epoch, `time` an int of nanoseconds,
`inet` a str. Collections are list / frozenset / dict (whole-value semantics).
"""

from __future__ import annotations

import datetime as _dt  # noqa: ICN001  the module's own name
import decimal
import ipaddress
import math
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

from .errors import InvalidRequest, SyntaxError_
from .wire import Writer


class CqlType:
    """Base type. Subclasses set `name`/`code` and implement encode/decode."""

    name: str = "?"
    code: int = 0

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def write_option(self, w: Writer) -> None:
        w.short(self.code)

    def sort_key(self, value: Any) -> Any:
        return value

    def from_literal(self, kind: str, value: Any) -> Any:
        raise InvalidRequest(f"Invalid {_describe(kind)} constant ({value}) for type {self.name}")

    def coerce(self, value: Any) -> Any:
        """Python value supplied by server-side helpers -> stored representation."""
        return value

    def to_python(self, value: Any) -> Any:
        """Stored representation -> what the DataStax driver would return (for test helpers)."""
        return value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CqlType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _describe(kind: str) -> str:
    return {"string": "STRING", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN",
            "uuid": "UUID", "blob": "HEX", "map": "map literal", "set": "set literal",
            "list": "list literal"}.get(kind, kind)


def _check_len(t: CqlType, data: bytes, n: int) -> None:
    if len(data) != n:
        raise InvalidRequest(f"Expected {n} or 0 byte value for {t.name} ({len(data)})")


class _FixedInt(CqlType):
    def __init__(self, name: str, code: int, fmt: str) -> None:
        self.name, self.code = name, code
        self._struct = struct.Struct(fmt)
        bits = self._struct.size * 8
        self._min, self._max = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def encode(self, value: Any) -> bytes:
        return self._struct.pack(int(value))

    def decode(self, data: bytes) -> int:
        _check_len(self, data, self._struct.size)
        return self._struct.unpack(data)[0]

    def from_literal(self, kind: str, value: Any) -> int:
        if kind != "int":
            return super().from_literal(kind, value)
        if not self._min <= value <= self._max:
            raise InvalidRequest(f"Invalid {self.name} value {value}: out of range")
        return int(value)


class _Float(CqlType):
    def __init__(self, name: str, code: int, fmt: str) -> None:
        self.name, self.code = name, code
        self._struct = struct.Struct(fmt)

    def encode(self, value: Any) -> bytes:
        return self._struct.pack(float(value))

    def decode(self, data: bytes) -> float:
        _check_len(self, data, self._struct.size)
        return self._struct.unpack(data)[0]

    def from_literal(self, kind: str, value: Any) -> float:
        if kind in ("int", "float"):
            return self.decode(self.encode(value))
        return super().from_literal(kind, value)


class _Text(CqlType):
    def __init__(self, name: str, code: int, ascii_only: bool) -> None:
        self.name, self.code, self._ascii = name, code, ascii_only

    def encode(self, value: Any) -> bytes:
        return str(value).encode("ascii" if self._ascii else "utf-8")

    def decode(self, data: bytes) -> str:
        try:
            return data.decode("ascii" if self._ascii else "utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"Invalid {'ASCII' if self._ascii else 'UTF-8'} bytes for {self.name}") from None

    def from_literal(self, kind: str, value: Any) -> str:
        if kind == "string":
            if self._ascii and not value.isascii():
                raise InvalidRequest(f"Invalid ASCII character in string literal {value!r}")
            return value
        return super().from_literal(kind, value)


class _Blob(CqlType):
    name, code = "blob", 0x0003

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: bytes) -> bytes:
        return bytes(data)

    def from_literal(self, kind: str, value: Any) -> bytes:
        if kind == "blob":
            return value
        return super().from_literal(kind, value)


class _Boolean(CqlType):
    name, code = "boolean", 0x0004

    def encode(self, value: Any) -> bytes:
        return b"\x01" if value else b"\x00"

    def decode(self, data: bytes) -> bool:
        _check_len(self, data, 1)
        return data != b"\x00"

    def from_literal(self, kind: str, value: Any) -> bool:
        if kind == "bool":
            return bool(value)
        return super().from_literal(kind, value)


def _varint_encode(n: int) -> bytes:
    length = max(1, (n + (n < 0)).bit_length() // 8 + 1)
    return n.to_bytes(length, "big", signed=True)


def _varint_decode(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


class _Varint(CqlType):
    name, code = "varint", 0x000E

    def encode(self, value: Any) -> bytes:
        return _varint_encode(int(value))

    def decode(self, data: bytes) -> int:
        if not data:
            raise InvalidRequest("Empty varint")
        return _varint_decode(data)

    def from_literal(self, kind: str, value: Any) -> int:
        if kind == "int":
            return int(value)
        return super().from_literal(kind, value)


class _Decimal(CqlType):
    name, code = "decimal", 0x0006

    def encode(self, value: Any) -> bytes:
        dec = decimal.Decimal(value)
        sign, digits, exponent = dec.as_tuple()
        if not isinstance(exponent, int):
            raise InvalidRequest("decimal cannot be NaN or infinite")
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return struct.pack(">i", -exponent) + _varint_encode(unscaled)

    def decode(self, data: bytes) -> decimal.Decimal:
        if len(data) < 5:
            raise InvalidRequest("Invalid decimal value")
        scale = struct.unpack(">i", data[:4])[0]
        unscaled = _varint_decode(data[4:])
        return decimal.Decimal(unscaled).scaleb(-scale)

    def from_literal(self, kind: str, value: Any) -> decimal.Decimal:
        if kind in ("int", "float"):
            return decimal.Decimal(str(value))
        return super().from_literal(kind, value)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class _Timestamp(CqlType):
    name, code = "timestamp", 0x000B

    def encode(self, value: Any) -> bytes:
        return struct.pack(">q", self.coerce(value))

    def decode(self, data: bytes) -> int:
        _check_len(self, data, 8)
        return struct.unpack(">q", data)[0]

    def coerce(self, value: Any) -> int:
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.UTC)
            return (value - _EPOCH) // _dt.timedelta(milliseconds=1)
        return int(value)

    def to_python(self, value: Any) -> _dt.datetime:
        return _dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=value)

    def from_literal(self, kind: str, value: Any) -> int:
        if kind == "int":
            return int(value)
        if kind == "string":
            try:
                parsed = _dt.datetime.fromisoformat(value)
            except ValueError:
                raise InvalidRequest(f"Unable to coerce '{value}' to a formatted date (long)") from None
            return self.coerce(parsed)
        return super().from_literal(kind, value)


class _Date(CqlType):
    name, code = "date", 0x0011

    def encode(self, value: Any) -> bytes:
        return struct.pack(">I", (self.coerce(value) + (1 << 31)) & 0xFFFFFFFF)

    def decode(self, data: bytes) -> int:
        _check_len(self, data, 4)
        return struct.unpack(">I", data)[0] - (1 << 31)

    def coerce(self, value: Any) -> int:
        if isinstance(value, _dt.date):
            return (value - _dt.date(1970, 1, 1)).days
        return int(value)

    def to_python(self, value: Any) -> _dt.date:
        return _dt.date(1970, 1, 1) + _dt.timedelta(days=value)

    def from_literal(self, kind: str, value: Any) -> int:
        if kind == "string":
            try:
                return (_dt.date.fromisoformat(value) - _dt.date(1970, 1, 1)).days
            except ValueError:
                raise InvalidRequest(f"Unable to coerce '{value}' to a formatted date") from None
        if kind == "int":
            return int(value) - (1 << 31)
        return super().from_literal(kind, value)


class _Time(_FixedInt):
    def __init__(self) -> None:
        super().__init__("time", 0x0012, ">q")


class _Uuid(CqlType):
    def __init__(self, name: str, code: int, time_based: bool) -> None:
        self.name, self.code, self._time_based = name, code, time_based

    def encode(self, value: Any) -> bytes:
        return (value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))).bytes

    def decode(self, data: bytes) -> uuid.UUID:
        _check_len(self, data, 16)
        value = uuid.UUID(bytes=bytes(data))
        if self._time_based and value.version != 1:
            raise InvalidRequest(f"Unsupported UUID version {value.version} for timeuuid")
        return value

    def sort_key(self, value: uuid.UUID) -> Any:
        # Cassandra orders time-based UUIDs by their timestamp first, then bytes.
        if value.version == 1:
            return (value.version, value.time, value.bytes)
        return (value.version, 0, value.bytes)

    def from_literal(self, kind: str, value: Any) -> uuid.UUID:
        if kind == "uuid":
            return self.decode(uuid.UUID(value).bytes)
        return super().from_literal(kind, value)


class _Inet(CqlType):
    name, code = "inet", 0x0010

    def encode(self, value: Any) -> bytes:
        return ipaddress.ip_address(value).packed

    def decode(self, data: bytes) -> str:
        if len(data) not in (4, 16):
            raise InvalidRequest("Invalid inet value")
        return str(ipaddress.ip_address(bytes(data)))

    def sort_key(self, value: str) -> Any:
        return ipaddress.ip_address(value).packed

    def from_literal(self, kind: str, value: Any) -> str:
        if kind == "string":
            return str(ipaddress.ip_address(value))
        return super().from_literal(kind, value)


class _Collection(CqlType):
    """list / set / map, serialised as [int] count + [bytes] elements (v3+)."""

    def __init__(self, kind: str, params: tuple[CqlType, ...], frozen: bool) -> None:
        self.kind, self.params, self.frozen = kind, params, frozen
        self.code = {"list": 0x0020, "map": 0x0021, "set": 0x0022}[kind]
        inner = f"{kind}<{', '.join(p.name for p in params)}>"
        self.name = f"frozen<{inner}>" if frozen else inner

    def write_option(self, w: Writer) -> None:
        w.short(self.code)
        for param in self.params:
            param.write_option(w)

    def _items(self, value: Any) -> list[Any]:
        if self.kind == "map":
            return [kv for pair in sorted(value.items(), key=lambda kv: self.params[0].sort_key(kv[0]))
                    for kv in pair]
        if self.kind == "set":
            return sorted(value, key=self.params[0].sort_key)
        return list(value)

    def encode(self, value: Any) -> bytes:
        w = Writer()
        items = self._items(value)
        count = len(items) // 2 if self.kind == "map" else len(items)
        w.int(count)
        for i, item in enumerate(items):
            elem_type = self.params[i % 2] if self.kind == "map" else self.params[0]
            w.bytes(elem_type.encode(item))
        return w.getvalue()

    def decode(self, data: bytes) -> Any:
        from .wire import Reader

        r = Reader(data)
        count = r.int()
        if self.kind == "map":
            result: dict[Any, Any] = {}
            for _ in range(count):
                key, val = r.bytes(), r.bytes()
                if key is None or val is None:
                    raise InvalidRequest("null is not supported inside collections")
                result[self.params[0].decode(key)] = self.params[1].decode(val)
            return result
        elems = []
        for _ in range(count):
            raw = r.bytes()
            if raw is None:
                raise InvalidRequest("null is not supported inside collections")
            elems.append(self.params[0].decode(raw))
        return frozenset(elems) if self.kind == "set" else elems

    def coerce(self, value: Any) -> Any:
        if self.kind == "map":
            return {self.params[0].coerce(k): self.params[1].coerce(v) for k, v in value.items()}
        elems = [self.params[0].coerce(v) for v in value]
        return frozenset(elems) if self.kind == "set" else elems

    def sort_key(self, value: Any) -> Any:
        return self.encode(value)

    def from_literal(self, kind: str, value: Any) -> Any:
        if self.kind == "map" and kind in ("map", "set") and (kind == "map" or not value):
            pairs = value if kind == "map" else []
            return {self.params[0].from_literal(*k): self.params[1].from_literal(*v) for k, v in pairs}
        if self.kind == "set" and kind in ("set", "map") and (kind == "set" or not value):
            return frozenset(self.params[0].from_literal(*e) for e in value)
        if self.kind == "list" and kind == "list":
            return [self.params[0].from_literal(*e) for e in value]
        return super().from_literal(kind, value)


def _natives() -> dict[str, CqlType]:
    text = _Text("text", 0x000D, ascii_only=False)
    types: list[CqlType] = [
        _Text("ascii", 0x0001, ascii_only=True),
        _FixedInt("bigint", 0x0002, ">q"),
        _Blob(),
        _Boolean(),
        _Decimal(),
        _Float("double", 0x0007, ">d"),
        _Float("float", 0x0008, ">f"),
        _FixedInt("int", 0x0009, ">i"),
        _Timestamp(),
        _Uuid("uuid", 0x000C, time_based=False),
        text,
        _Varint(),
        _Uuid("timeuuid", 0x000F, time_based=True),
        _Inet(),
        _Date(),
        _Time(),
        _FixedInt("smallint", 0x0013, ">h"),
        _FixedInt("tinyint", 0x0014, ">b"),
    ]
    table = {t.name: t for t in types}
    table["varchar"] = text
    return table


NATIVE_TYPES: dict[str, CqlType] = _natives()
TEXT = NATIVE_TYPES["text"]
BOOLEAN = NATIVE_TYPES["boolean"]
BIGINT = NATIVE_TYPES["bigint"]
INT = NATIVE_TYPES["int"]
UUID = NATIVE_TYPES["uuid"]
BLOB = NATIVE_TYPES["blob"]
DOUBLE = NATIVE_TYPES["double"]
INET = NATIVE_TYPES["inet"]
TIMESTAMP = NATIVE_TYPES["timestamp"]

_TYPE_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|<|>|,)")
UNSUPPORTED_TYPES = {"counter", "duration", "tuple"}


def list_of(t: CqlType, frozen: bool = False) -> CqlType:
    return _Collection("list", (t,), frozen)


def set_of(t: CqlType, frozen: bool = False) -> CqlType:
    return _Collection("set", (t,), frozen)


def map_of(k: CqlType, v: CqlType, frozen: bool = False) -> CqlType:
    return _Collection("map", (k, v), frozen)


def parse_type(text: str) -> CqlType:
    """Parse 'bigint', 'frozen<map<text, text>>', ... into a CqlType."""
    tokens = [m.group(1) for m in _TYPE_TOKEN.finditer(text)]
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise SyntaxError_(f"Invalid type '{text}'")
    pos = 0

    def parse(frozen: bool) -> CqlType:
        nonlocal pos
        if pos >= len(tokens):
            raise SyntaxError_(f"Invalid type '{text}'")
        name = tokens[pos].lower()
        pos += 1
        if name in ("frozen", "list", "set", "map"):
            expect("<")
            if name == "frozen":
                inner = parse(True)
                expect(">")
                return inner
            params = [parse(False)]
            if name == "map":
                expect(",")
                params.append(parse(False))
            expect(">")
            return _Collection(name, tuple(params), frozen)
        if name in UNSUPPORTED_TYPES:
            raise InvalidRequest(f"Type {name} is not supported by this test server")
        try:
            return NATIVE_TYPES[name]
        except KeyError:
            raise InvalidRequest(f"Unknown type {name}") from None

    def expect(tok: str) -> None:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] != tok:
            raise SyntaxError_(f"Invalid type '{text}'")
        pos += 1

    result = parse(False)
    if pos != len(tokens):
        raise SyntaxError_(f"Invalid type '{text}'")
    return result


@total_ordering
class Desc:
    """Wraps a sort key to invert its order (clustering columns declared DESC)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and self.key == other.key

    def __lt__(self, other: Desc) -> bool:
        return other.key < self.key

    def __hash__(self) -> int:
        return hash(self.key)


def compare(t: CqlType, left: Any, right: Any) -> int:
    """Three-way comparison of two non-null values of type `t`."""
    a, b = t.sort_key(left), t.sort_key(right)
    if isinstance(a, float) and isinstance(b, float) and (math.isnan(a) or math.isnan(b)):
        return 0 if (math.isnan(a) and math.isnan(b)) else (1 if math.isnan(a) else -1)
    return (a > b) - (a < b)


@dataclass(frozen=True)
class ColumnSpec:
    """A column in a result or bind-variable metadata: (keyspace, table, name, type)."""

    keyspace: str
    table: str
    name: str
    type: CqlType


Encoder = Callable[[Any], bytes]
