"""The formats without a schema: ``bytes`` (the raw bytes, unchanged) and ``string`` (UTF-8 text)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from spouts.kafka.formats.spec import Decoded, Failure


@dataclass(frozen=True, slots=True)
class BytesDecoder:
    """Keeps the raw bytes: never fails."""

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.binary()

    def decode(self, values: pa.Array) -> Decoded:
        return Decoded(values)


@dataclass(frozen=True, slots=True)
class StringDecoder:
    """UTF-8 text: one validating Arrow cast; only a batch that fails it is checked record by record."""

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.string()

    def decode(self, values: pa.Array) -> Decoded:
        try:
            return Decoded(values.cast(pa.string()))
        except pa.ArrowInvalid:
            pass
        bad: dict[int, Failure] = {}
        for i, v in enumerate(values.to_pylist()):
            if v is None:
                continue
            try:
                v.decode("utf-8")
            except UnicodeDecodeError as e:
                bad[i] = Failure("utf8_invalid", f"not UTF-8 text: {e.reason} at byte {e.start}")
        mask = pa.array([i in bad for i in range(len(values))])
        return Decoded(pa.compute.if_else(mask, pa.scalar(None, pa.binary()), values).cast(pa.string()), bad)
