"""Envelopes (9-byte header + body) and the protocol v5 checksummed segment layer.

Before a v5 handshake completes, and always in v4, envelopes travel bare on the
socket. After the server answers STARTUP with READY/AUTHENTICATE on a v5
connection, envelopes travel inside segments (CRC24-protected header, CRC32
trailer, payload <= 128 KiB - 1), see "2. Frame Format" of native_protocol_v5.
Compression is never negotiated (SUPPORTED advertises none), so only the
uncompressed segment format exists here.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .errors import ProtocolError

HEADER = struct.Struct(">BBhBi")
HEADER_SIZE = HEADER.size  # 9
RESPONSE_DIRECTION = 0x80
MAX_BODY = 256 * 1024 * 1024

FLAG_COMPRESSED = 0x01
FLAG_TRACING = 0x02
FLAG_CUSTOM_PAYLOAD = 0x04
FLAG_WARNING = 0x08
FLAG_USE_BETA = 0x10

SEGMENT_MAX_PAYLOAD = 128 * 1024 - 1
_SEGMENT_HEADER_LEN = 3
_CRC24_LEN = 3
_CRC32_LEN = 4
_CRC24_INIT = 0x875060
_CRC24_POLY = 0x1974F0B
_CRC32_INITIAL = zlib.crc32(b"\xfa\x2d\x55\xca")


@dataclass(frozen=True)
class Envelope:
    """One request or response: header fields plus raw body."""

    version: int
    flags: int
    stream: int
    opcode: int
    body: bytes


def encode_envelope(version: int, stream: int, opcode: int, body: bytes, flags: int = 0) -> bytes:
    """Serialise a response envelope (direction bit set on the version byte)."""
    return HEADER.pack(version | RESPONSE_DIRECTION, flags, stream, opcode, len(body)) + body


def crc24(value: int, length: int) -> int:
    """CRC24 over the `length` little-endian bytes of `value`, as the v5 spec defines it."""
    crc = _CRC24_INIT
    for _ in range(length):
        crc ^= (value & 0xFF) << 16
        value >>= 8
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= _CRC24_POLY
    return crc


def encode_segments(payload: bytes) -> bytes:
    """Wrap envelope bytes into one self-contained segment, or several partial ones."""
    chunks = [payload[i:i + SEGMENT_MAX_PAYLOAD] for i in range(0, len(payload), SEGMENT_MAX_PAYLOAD)] or [b""]
    self_contained = len(chunks) == 1
    out = bytearray()
    for chunk in chunks:
        header = len(chunk) | ((1 << 17) if self_contained else 0)
        out += header.to_bytes(_SEGMENT_HEADER_LEN, "little")
        out += crc24(header, _SEGMENT_HEADER_LEN).to_bytes(_CRC24_LEN, "little")
        out += chunk
        out += zlib.crc32(chunk, _CRC32_INITIAL).to_bytes(_CRC32_LEN, "little")
    return bytes(out)


class EnvelopeDecoder:
    """Incremental decoder: raw socket bytes in, envelopes out, one at a time.

    `enable_segments()` switches the remaining (and all future) input to the v5
    segment layer; it must be called right after the READY/AUTHENTICATE reply is
    produced and before the next `next_envelope()`.
    """

    def __init__(self) -> None:
        self._raw = bytearray()
        self._envelopes = bytearray()
        self._segmented = False

    @property
    def segmented(self) -> bool:
        return self._segmented

    def feed(self, data: bytes) -> None:
        self._raw += data

    def enable_segments(self) -> None:
        self._segmented = True

    def _unwrap_segments(self) -> None:
        while len(self._raw) >= _SEGMENT_HEADER_LEN + _CRC24_LEN:
            header = int.from_bytes(self._raw[:_SEGMENT_HEADER_LEN], "little")
            expected = int.from_bytes(self._raw[_SEGMENT_HEADER_LEN:_SEGMENT_HEADER_LEN + _CRC24_LEN], "little")
            if crc24(header, _SEGMENT_HEADER_LEN) != expected:
                raise ProtocolError("CRC mismatch on segment header")
            length = header & SEGMENT_MAX_PAYLOAD
            start = _SEGMENT_HEADER_LEN + _CRC24_LEN
            end = start + length + _CRC32_LEN
            if len(self._raw) < end:
                return
            payload = bytes(self._raw[start:start + length])
            crc = int.from_bytes(self._raw[start + length:end], "little")
            if zlib.crc32(payload, _CRC32_INITIAL) != crc:
                raise ProtocolError("CRC mismatch on segment payload")
            del self._raw[:end]
            self._envelopes += payload

    def next_envelope(self) -> Envelope | None:
        if self._segmented:
            self._unwrap_segments()
            buf = self._envelopes
        else:
            buf = self._raw
        if len(buf) < HEADER_SIZE:
            return None
        version, flags, stream, opcode, length = HEADER.unpack_from(buf, 0)
        if length < 0 or length > MAX_BODY:
            raise ProtocolError(f"Invalid frame body length {length}")
        if len(buf) < HEADER_SIZE + length:
            return None
        body = bytes(buf[HEADER_SIZE:HEADER_SIZE + length])
        del buf[:HEADER_SIZE + length]
        return Envelope(version & 0x7F, flags, stream, opcode, body)
