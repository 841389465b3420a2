"""One planned range read by the native reader, as Arrow record batches: the rules of
:func:`spouts.kafka.reader.read_range` (stop on position, end-of-partition events move it, an error that
waiting never mends raises, no progress for ``read_timeout_s`` is an unavailable partition), with each
chunk's column buffers copied into one record batch.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from spouts.kafka.native import CHUNK_BYTES, Chunk, NativeReader
from spouts.kafka.reader import POLL_S, follow_range, raise_unmended
from spouts.metadata import PartitionMetadata


def read_native(reader: NativeReader, meta: PartitionMetadata, schema: pa.Schema, *, batch_size: int,
                read_timeout_s: float, max_bytes: int = CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """Yield ``meta``'s records in offset order, in batches of at most ``batch_size`` rows and ``max_bytes`` of
    values (and keys) of ``schema`` (columns of :data:`spouts.kafka.arrow.SCHEMA` but ``headers``)."""
    if meta.empty:
        return
    keys = "key" in schema.names

    def step(pos: int) -> tuple[pa.RecordBatch | None, int]:
        chunk = reader.read(pos, meta.next_offset, batch_size, POLL_S, keys=keys, max_bytes=max_bytes)
        batch = to_batch(meta, chunk, schema) if chunk.count else None  # before the next read reuses the buffers
        if chunk.err:
            err = KafkaError(chunk.err, chunk.err_str.decode(errors="replace"), fatal=bool(chunk.fatal))
            raise_unmended(err, meta, chunk.pos, lambda: reader.watermarks(meta.topic, meta.partition, timeout_s=5.0))
        return batch, chunk.pos

    reader.assign(meta.topic, meta.partition, meta.first_offset)
    try:
        yield from follow_range(meta, step, read_timeout_s)
    finally:
        with contextlib.suppress(KafkaException):
            reader.unassign()  # stop prefetching past the range


def _buffer(address: int | None, size: int) -> pa.Buffer:
    """A copy of ``size`` bytes at ``address`` (the reader reuses its buffers)."""
    return pa.py_buffer(ctypes.string_at(address or 0, size) if size else b"")


def _validity(address: int | None, count: int, nulls: int) -> pa.Buffer | None:
    return _buffer(address, (count + 7) // 8) if nulls else None


def _binary(count: int, offsets: int | None, data: int | None, valid: int | None, nulls: int) -> pa.Array:
    size = ctypes.cast(offsets or 0, ctypes.POINTER(ctypes.c_int32))[count]
    return pa.Array.from_buffers(pa.binary(), count, [_validity(valid, count, nulls), _buffer(offsets, 4 * (count + 1)),
                                                      _buffer(data, size)], null_count=nulls)


_COLUMNS: dict[str, Callable[[PartitionMetadata, Chunk, pa.DataType], pa.Array]] = {
    "topic": lambda meta, c, t: pa.repeat(pa.scalar(meta.topic, t), c.count),
    "partition": lambda meta, c, t: pa.repeat(pa.scalar(meta.partition, t), c.count),
    "offset": lambda _m, c, t: pa.Array.from_buffers(t, c.count, [None, _buffer(c.offsets, 8 * c.count)]),
    "timestamp": lambda _m, c, t: pa.Array.from_buffers(
        t, c.count, [_validity(c.timestamp_valid, c.count, c.timestamps_missing), _buffer(c.timestamps_us, 8 * c.count)],
        null_count=c.timestamps_missing),
    "key": lambda _m, c, _t: _binary(c.count, c.key_offsets, c.keys, c.key_valid, c.keys_null),
    "value": lambda _m, c, _t: _binary(c.count, c.value_offsets, c.values, c.value_valid, c.values_null),
}


def to_batch(meta: PartitionMetadata, chunk: Chunk, schema: pa.Schema) -> pa.RecordBatch:
    """The chunk's records as one batch of ``schema``."""
    return pa.RecordBatch.from_arrays([_COLUMNS[f.name](meta, chunk, f.type) for f in schema], schema=schema)
