"""The Arrow read path for Spark executors: one planned range as ``pyarrow.RecordBatch`` es.

Schema (:data:`SCHEMA`): ``topic`` string, ``partition`` int32, ``offset`` int64, ``timestamp``
timestamp[ms] (UTC; null when the broker reports none), ``key`` and ``value`` binary (null for a
null key/value), ``headers`` list<struct<key: string, value: binary>> (empty list when none).
Columns are built per ``consume`` chunk from confluent-kafka's messages; no other per-record
Python object is made. Consumers come from the per-process pool (assign + seek per read).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Message

from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.consumers import POOL
from spouts.kafka.reader import read_range
from spouts.metadata import PartitionMetadata
from spouts.protocols import DEFAULT_ARROW_BATCH_SIZE

DEFAULT_BATCH_SIZE = DEFAULT_ARROW_BATCH_SIZE

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(HEADER_TYPE)),
])

_NO_HEADERS = pa.array([], type=HEADER_TYPE)


def read_arrow(config: KafkaSpoutConfig, topology_id: str, meta: PartitionMetadata,
               batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[pa.RecordBatch]:
    """Yield ``meta``'s records as record batches of at most ``batch_size`` rows, in offset order.

    Raises like :func:`spouts.kafka.reader.read_range` (unavailable partition, data loss). An empty
    range yields nothing.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if meta.empty:
        return
    with POOL.lease(config.consumer_config(topology_id)) as consumer:
        pending: list[Message] = []
        for chunk in read_range(consumer, meta, read_timeout_s=config.read_timeout_s, chunk=batch_size):
            pending.extend(chunk)
            while len(pending) >= batch_size:
                yield to_batch(meta.topic, meta.partition, pending[:batch_size])
                del pending[:batch_size]
        if pending:
            yield to_batch(meta.topic, meta.partition, pending)


def to_batch(topic: str, partition: int, msgs: list[Message]) -> pa.RecordBatch:
    """One record batch from messages of one partition."""
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    headers: list[Any] = [m.headers() for m in msgs]
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array([ts if kind else None for kind, ts in stamps], SCHEMA.field("timestamp").type),
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        _headers(headers, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _headers(headers: list[Any], n: int) -> pa.Array:
    if not any(headers):
        return pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), _NO_HEADERS)
    return pa.array([h or [] for h in headers], SCHEMA.field("headers").type)
