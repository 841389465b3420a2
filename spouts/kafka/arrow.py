"""The Arrow read path for Spark executors: one planned range as ``pyarrow.RecordBatch`` es.

Schema (:data:`SCHEMA`): ``topic`` string, ``partition`` int32, ``offset`` int64, ``timestamp``
timestamp[us] (UTC; null when the broker reports none; microseconds because that is what Spark
takes from Arrow, so batches reach it without a cast), ``key`` and ``value`` binary (null for a
null key/value), ``headers`` list<struct<key: string, value: binary>> (empty list when none).
Columns are built per ``consume`` chunk from confluent-kafka's messages, one pass per column;
offsets and the constant columns without any per-record Python object, or, with the native reader
(:mod:`spouts.kafka.native`, ``reader``), as column buffers in C with no per-record Python at all. A read
may ask for some columns only (:func:`schema_of`): the others cost nothing. Consumers come from
per-process pools (assign + seek per read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Message

from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.consumers import POOL
from spouts.kafka.gc_pause import gc_paused
from spouts.kafka.native import NATIVE_POOL, available, load
from spouts.kafka.native.batches import read_native
from spouts.kafka.reader import read_range
from spouts.metadata import PartitionMetadata
from spouts.protocols import DEFAULT_ARROW_BATCH_SIZE

DEFAULT_BATCH_SIZE = DEFAULT_ARROW_BATCH_SIZE

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(HEADER_TYPE)),
])

_NO_HEADERS = pa.array([], type=HEADER_TYPE)

log = logging.getLogger(__name__)


def schema_of(columns: Sequence[str] | None) -> pa.Schema:
    """:data:`SCHEMA` with only ``columns`` (None: all), in its order."""
    if columns is None:
        return SCHEMA
    unknown = sorted(set(columns) - set(SCHEMA.names))
    if unknown:
        msg = f"not a column of a Kafka record: {', '.join(unknown)} (columns: {', '.join(SCHEMA.names)})"
        raise ValueError(msg)
    return pa.schema([f for f in SCHEMA if f.name in columns])


def read_arrow(config: KafkaSpoutConfig, topology_id: str, meta: PartitionMetadata,
               batch_size: int = DEFAULT_BATCH_SIZE,
               columns: Sequence[str] | None = None) -> Generator[pa.RecordBatch, None, None]:
    """Yield ``meta``'s records as record batches of at most ``batch_size`` rows, in offset order, with
    ``columns`` only (None: all of :data:`SCHEMA`).

    Raises like :func:`spouts.kafka.reader.read_range` (unavailable partition, data loss). An empty
    range yields nothing.
    """
    if batch_size < 1:
        msg = "batch_size must be >= 1"
        raise ValueError(msg)
    schema = schema_of(columns)
    if meta.empty:
        return
    conf = config.consumer_config(topology_id, range_records=meta.next_offset - meta.first_offset)
    if reads_natively(config.reader, schema.names):
        with NATIVE_POOL.lease(conf) as reader:
            yield from read_native(reader, meta, schema, batch_size=batch_size, read_timeout_s=config.read_timeout_s)
        return
    with POOL.lease(conf) as consumer, closing(read_range(consumer, meta, read_timeout_s=config.read_timeout_s,
                                                           chunk=batch_size)) as chunks:
        pending: list[Message] = []
        done = False
        while not done:
            ready: list[pa.RecordBatch] = []
            with gc_paused():  # never across the yield below
                chunk = next(chunks, None)
                if chunk is None:
                    done = True
                    if pending:
                        ready.append(to_batch(meta.topic, meta.partition, pending, schema))
                else:
                    pending.extend(chunk)
                    while len(pending) >= batch_size:
                        ready.append(to_batch(meta.topic, meta.partition, pending[:batch_size], schema))
                        del pending[:batch_size]
            yield from ready


def reads_natively(reader: str, columns: Sequence[str]) -> bool:
    """Whether a read of ``columns`` takes the native reader: ``reader`` allows it here and no header is asked
    for (the native reader does not build headers)."""
    return "headers" not in columns and native(reader)


def read_path(reader: str, columns: Sequence[str] | None = None) -> str:
    """How a read of ``columns`` (None: all) reads its range, for people: the start-up line of a pipeline. Never
    raises: with ``native`` and no library here the line says so, and the read tasks raise why."""
    names = schema_of(columns).names
    if reader == "python":
        return "confluent-kafka's messages (kafka.reader: python)"
    if "headers" in names:
        return "confluent-kafka's messages (the plan reads headers, which the native reader does not build)"
    why = available()
    if why is None:
        return "the native reader (librdkafka's message batches copied into Arrow columns in C)"
    if reader == "native":
        return f"the native reader (kafka.reader: native), which does not load on the driver: {why}"
    native(reader)  # auto: the one warning, on the driver
    return f"confluent-kafka's messages (the native reader is unavailable: {why})"


def native(reader: str) -> bool:
    """Whether ``reader`` (``kafka.reader``) reads natively here; ``native`` where it is not built raises why."""
    if reader == "python":
        return False
    if reader == "native":
        load()
        return True
    return _native_here()


@cache
def _native_here() -> bool:
    why = available()
    if why is not None:
        log.warning("reading Kafka through confluent-kafka's messages (more CPU per record): %s", why)
    return why is None


def to_batch(topic: str, partition: int, msgs: list[Message], schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    """One record batch of ``schema`` (:data:`SCHEMA` or some of its columns, :func:`schema_of`) from messages
    of one partition, in offset order."""
    return pa.RecordBatch.from_arrays([_COLUMNS[f.name](topic, partition, msgs) for f in schema], schema=schema)


def _offsets(msgs: list[Message]) -> pa.Array:
    first, last = msgs[0].offset(), msgs[-1].offset()
    if first is not None and last is not None and last - first == len(msgs) - 1:  # no gaps (transaction markers, aborted records): the offsets are a range
        return pa.array(np.arange(first, last + 1, dtype=np.int64))
    return pa.array([m.offset() for m in msgs], pa.int64())


def _timestamps(msgs: list[Message]) -> pa.Array:
    stamps = np.array([m.timestamp() for m in msgs], dtype=np.int64).reshape(len(msgs), 2)  # (type, ms)
    missing = stamps[:, 0] == 0  # TIMESTAMP_NOT_AVAILABLE
    return pa.array(stamps[:, 1] * 1000, SCHEMA.field("timestamp").type, mask=missing if missing.any() else None)


def _headers(msgs: list[Message]) -> pa.Array:
    headers: list[Any] = [m.headers() for m in msgs]
    if not any(headers):
        return pa.ListArray.from_arrays(pa.array([0] * (len(msgs) + 1), pa.int32()), _NO_HEADERS)
    return pa.array([h or [] for h in headers], SCHEMA.field("headers").type)


_COLUMNS: dict[str, Callable[[str, int, list[Message]], pa.Array]] = {
    "topic": lambda topic, _p, msgs: pa.repeat(pa.scalar(topic, pa.string()), len(msgs)),
    "partition": lambda _t, partition, msgs: pa.repeat(pa.scalar(partition, pa.int32()), len(msgs)),
    "offset": lambda _t, _p, msgs: _offsets(msgs),
    "timestamp": lambda _t, _p, msgs: _timestamps(msgs),
    "key": lambda _t, _p, msgs: pa.array([m.key() for m in msgs], pa.binary()),
    "value": lambda _t, _p, msgs: pa.array([m.value() for m in msgs], pa.binary()),
    "headers": lambda _t, _p, msgs: _headers(msgs),
}
