"""A process that decodes batches for the fuzz tests, so a decoder that crashes its process fails a
test instead of taking the test runner with it. Requests and answers are length-prefixed pickles on
stdin and stdout: ``(decoder, [values, ...])`` in, one outcome per batch out."""

from __future__ import annotations

import pickle
import struct
import sys
from typing import IO, Any

import pyarrow as pa

#: One batch's outcome: ``("ok", rows, {index: (reason, message)})`` or ``("raised", description)``.
Outcome = tuple[Any, ...]


def decode(decoder: Any, values: list[bytes | None]) -> Outcome:
    """What ``decoder`` makes of ``values``: its rows and bad values, or the exception it raised."""
    try:
        out = decoder.decode(pa.array(values, pa.binary()))
    except Exception as e:  # noqa: BLE001 - any exception is an outcome the test reports
        return ("raised", f"{type(e).__name__}: {e}")
    return ("ok", [repr(r) for r in out.array.to_pylist()], {i: (f.reason, f.message) for i, f in out.bad.items()})


def read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    return stream.read(size)


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(struct.pack(">I", len(payload)) + payload)
    stream.flush()


def main() -> None:
    while (frame := read_frame(sys.stdin.buffer)) is not None:
        decoder, batches = pickle.loads(frame)
        write_frame(sys.stdout.buffer, pickle.dumps([decode(decoder, b) for b in batches]))


if __name__ == "__main__":
    main()
