"""Primitive encodings of the CQL native protocol (section 3 of the v4/v5 specs).

`Reader` decodes a frame body, `Writer` builds one. Both speak the protocol's
notations ([short], [string], [bytes], [value], maps, ...) so that message code
reads like the specification.
"""

from __future__ import annotations

import builtins
import ipaddress
import struct
import uuid
from typing import Final

from .errors import ProtocolError


class _Unset:
    """The [value] of length -2: 'not set', leaves the stored value untouched (v4+)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:  # noqa: PYI034  a singleton: the one instance, not a new one of a subclass
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()

CONSISTENCY_NAMES: Final[dict[int, str]] = {
    0x0000: "ANY",
    0x0001: "ONE",
    0x0002: "TWO",
    0x0003: "THREE",
    0x0004: "QUORUM",
    0x0005: "ALL",
    0x0006: "LOCAL_QUORUM",
    0x0007: "EACH_QUORUM",
    0x0008: "SERIAL",
    0x0009: "LOCAL_SERIAL",
    0x000A: "LOCAL_ONE",
}
CONSISTENCY_CODES: Final[dict[str, int]] = {v: k for k, v in CONSISTENCY_NAMES.items()}
SERIAL_CONSISTENCIES: Final = frozenset({"SERIAL", "LOCAL_SERIAL"})

_SHORT = struct.Struct(">H")
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_LONG = struct.Struct(">q")


class Reader:
    """Sequential decoder over one frame body; truncation raises ProtocolError."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, n: int) -> bytes:
        end = self._pos + n
        if n < 0 or end > len(self._data):
            raise ProtocolError("Not enough bytes to read the frame body")
        chunk = self._data[self._pos:end]
        self._pos = end
        return chunk

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def byte(self) -> int:
        return self._take(1)[0]

    def short(self) -> int:
        return _SHORT.unpack(self._take(2))[0]

    def int(self) -> int:
        return _INT.unpack(self._take(4))[0]

    def uint(self) -> builtins.int:
        return _UINT.unpack(self._take(4))[0]

    def long(self) -> builtins.int:
        return _LONG.unpack(self._take(8))[0]

    def string(self) -> str:
        return self._take(self.short()).decode("utf-8")

    def long_string(self) -> str:
        return self._take(self.int()).decode("utf-8")

    def short_bytes(self) -> bytes:
        return self._take(self.short())

    def bytes(self) -> bytes | None:
        n = self.int()
        return None if n < 0 else self._take(n)

    def value(self) -> builtins.bytes | _Unset | None:
        n = self.int()
        if n == -1:
            return None
        if n == -2:
            return UNSET
        if n < -2:
            raise ProtocolError(f"Invalid value length {n}")
        return self._take(n)

    def string_list(self) -> list[str]:
        return [self.string() for _ in range(self.short())]

    def string_map(self) -> dict[str, str]:
        return {self.string(): self.string() for _ in range(self.short())}

    def bytes_map(self) -> dict[str, builtins.bytes | None]:
        return {self.string(): self.bytes() for _ in range(self.short())}

    def consistency(self) -> str:
        code = self.short()
        try:
            return CONSISTENCY_NAMES[code]
        except KeyError:
            raise ProtocolError(f"Unknown code {code} for a consistency level") from None


class Writer:
    """Accumulates an encoded frame body."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def raw(self, data: bytes) -> Writer:
        self._buf += data
        return self

    def byte(self, b: int) -> Writer:
        self._buf.append(b & 0xFF)
        return self

    def short(self, n: int) -> Writer:
        self._buf += _SHORT.pack(n)
        return self

    def int(self, n: int) -> Writer:
        self._buf += _INT.pack(n)
        return self

    def long(self, n: builtins.int) -> Writer:
        self._buf += _LONG.pack(n)
        return self

    def string(self, s: str) -> Writer:
        data = s.encode("utf-8")
        return self.short(len(data)).raw(data)

    def long_string(self, s: str) -> Writer:
        data = s.encode("utf-8")
        return self.int(len(data)).raw(data)

    def short_bytes(self, data: bytes) -> Writer:
        return self.short(len(data)).raw(data)

    def bytes(self, data: bytes | None) -> Writer:
        if data is None:
            return self.int(-1)
        return self.int(len(data)).raw(data)

    def string_list(self, items: list[str]) -> Writer:
        self.short(len(items))
        for item in items:
            self.string(item)
        return self

    def string_multimap(self, mapping: dict[str, list[str]]) -> Writer:
        self.short(len(mapping))
        for key, values in mapping.items():
            self.string(key).string_list(values)
        return self

    def consistency(self, name: str) -> Writer:
        return self.short(CONSISTENCY_CODES[name])

    def uuid(self, value: uuid.UUID) -> Writer:
        return self.raw(value.bytes)

    def inet(self, host: str, port: builtins.int) -> Writer:
        packed = ipaddress.ip_address(host).packed
        return self.byte(len(packed)).raw(packed).int(port)
