"""The Arrow read path for Spark executors: one planned range as ``pyarrow.RecordBatch`` es.

Schema (:data:`SCHEMA`): ``topic`` string, ``partition`` int32, ``offset`` int64, ``timestamp``
timestamp[us] (UTC; null when the broker reports none; microseconds because that is what Spark
takes from Arrow, so batches reach it without a cast), ``key`` and ``value`` binary (null for a
null key/value), ``headers`` list<struct<key: string, value: binary>> (empty list when none).
Columns are built per ``consume`` chunk from confluent-kafka's messages, one pass per column;
offsets and the constant columns without any per-record Python object. Consumers come from the
per-process pool (assign + seek per read).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import closing
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Message

from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.consumers import POOL
from spouts.kafka.gc_pause import gc_paused
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


def read_arrow(config: KafkaSpoutConfig, topology_id: str, meta: PartitionMetadata,
               batch_size: int = DEFAULT_BATCH_SIZE) -> Generator[pa.RecordBatch, None, None]:
    """Yield ``meta``'s records as record batches of at most ``batch_size`` rows, in offset order.

    Raises like :func:`spouts.kafka.reader.read_range` (unavailable partition, data loss). An empty
    range yields nothing.
    """
    if batch_size < 1:
        msg = "batch_size must be >= 1"
        raise ValueError(msg)
    if meta.empty:
        return
    conf = config.consumer_config(topology_id, range_records=meta.next_offset - meta.first_offset)
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
                        ready.append(to_batch(meta.topic, meta.partition, pending))
                else:
                    pending.extend(chunk)
                    while len(pending) >= batch_size:
                        ready.append(to_batch(meta.topic, meta.partition, pending[:batch_size]))
                        del pending[:batch_size]
            yield from ready


def to_batch(topic: str, partition: int, msgs: list[Message]) -> pa.RecordBatch:
    """One record batch from messages of one partition, in offset order."""
    n = len(msgs)
    first, last = msgs[0].offset(), msgs[-1].offset()
    if first is not None and last is not None and last - first == n - 1:  # no gaps (transaction markers, aborted records): the offsets are a range
        offsets = pa.array(np.arange(first, last + 1, dtype=np.int64))
    else:
        offsets = pa.array([m.offset() for m in msgs], pa.int64())
    stamps = np.array([m.timestamp() for m in msgs], dtype=np.int64).reshape(n, 2)  # (type, ms)
    missing = stamps[:, 0] == 0  # TIMESTAMP_NOT_AVAILABLE
    timestamps = pa.array(stamps[:, 1] * 1000, SCHEMA.field("timestamp").type, mask=missing if missing.any() else None)
    headers: list[Any] = [m.headers() for m in msgs]
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offsets,
        timestamps,
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        _headers(headers, n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _headers(headers: list[Any], n: int) -> pa.Array:
    if not any(headers):
        return pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), _NO_HEADERS)
    return pa.array([h or [] for h in headers], SCHEMA.field("headers").type)
