"""The audit's own read of committed source ranges: a plain confluent-kafka consumer, never the pipeline's reader.

The pipeline reads ranges in Spark tasks through pooled consumers or the native reader
(:mod:`spouts.kafka.arrow`), pruned to the columns its plans use. This read shares none of that:
one consumer of its own is assigned the exact start offset of every range (``isolation.level`` as the
spout reads, ``read_committed`` by default: aborted records and transaction markers are skipped as the
pipeline skips them) and every column of every record up to the range's end is kept, so a reader that
drops, repeats or misplaces a record in the pipeline shows as a difference instead of counting twice.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from spouts.kafka.client_log import logged
from spouts.metadata import BatchPlan

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
TIMEOUT_S = 120.0  # to read every range to its end
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
#: The raw record columns, as the spout's records enter a topology (``topic`` .. ``headers``).
RAW_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()), ("value", pa.binary()),
                        ("headers", pa.list_(_HEADER))])


class SourceReadError(RuntimeError):
    """A range could not be read to its end (the log ends before it, or the cluster did not answer in time)."""


#: One range to read: topic, partition, first offset, end offset (exclusive).
Range = tuple[str, int, int, int]
CHUNK = 10_000  # records per batch yielded (a partition's range is never held whole)


def ranges_of(plan: BatchPlan) -> list[Range]:
    """``plan``'s non-empty ranges, in (topic, partition) order."""
    return [(p.topic, p.partition, m.first_offset, m.next_offset) for p, m in sorted(plan.partitions.items())
            if not m.empty]


def read_ranges(kafka: Mapping[str, str], isolation: str, ranges: Sequence[Range], pipeline: str,
                timeout_s: float = TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """Every record of ``ranges`` as batches of :data:`RAW_SCHEMA` (each of one partition, in offset order);
    ``kafka``: librdkafka settings of the source cluster (``bootstrap.servers`` and its security properties)."""
    ends = {(t, p): (first, end) for t, p, first, end in ranges if end > first}
    if not ends:
        return
    rows: dict[tuple[str, int], list[Message]] = {tp: [] for tp in ends}
    consumer = Consumer(logged({**kafka, "group.id": f"trident-{pipeline}-audit-recount",
                                "isolation.level": isolation, "enable.auto.commit": "false",
                                "enable.partition.eof": "true", "auto.offset.reset": "error"}))
    try:
        consumer.assign([TopicPartition(t, p, first) for (t, p), (first, _) in ends.items()])
        todo = set(ends)
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                msg = f"could not read the ranges to their ends in {timeout_s:.0f} s: still reading {sorted(todo)}"
                raise SourceReadError(msg)
            eof: set[tuple[str, int]] = set()
            for m in consumer.consume(500, 1.0):
                tp = (str(m.topic()), int(m.partition() or 0))
                err = m.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    eof.add(tp)
                elif err is not None:
                    msg = f"{tp[0]}:{tp[1]}: {err.str()}"
                    raise SourceReadError(msg)
                elif tp in todo and int(m.offset() or 0) < ends[tp][1]:
                    rows[tp].append(m)
            todo -= {tp for tp in todo if _done(consumer, tp, ends[tp][1], eof=tp in eof)}
            for tp, msgs in rows.items():
                if len(msgs) >= CHUNK or (msgs and tp not in todo):
                    yield _batch(msgs)
                    rows[tp] = []
                    deadline = time.monotonic() + timeout_s
    finally:
        consumer.close()


def _done(consumer: Consumer, tp: tuple[str, int], end: int, *, eof: bool) -> bool:
    """Whether ``tp`` is read to ``end`` (the position after the messages consumed so far, markers and aborted
    records included, is at ``end`` or past it). At the log's end short of ``end``, the range is not held."""
    [pos] = consumer.position([TopicPartition(*tp)])
    if pos.offset >= end:
        return True
    if eof and pos.offset >= 0:
        msg = f"{tp[0]}:{tp[1]}: the log ends at offset {pos.offset}, before the range's end {end}"
        raise SourceReadError(msg)
    return False


def _batch(msgs: list[Message]) -> pa.RecordBatch:
    def stamp(m: Message) -> dt.datetime | None:
        kind, ms = m.timestamp()
        return None if kind == 0 else _EPOCH + dt.timedelta(milliseconds=ms)

    def headers(m: Message) -> list[dict[str, Any]]:
        return [{"key": h[0], "value": h[1]} for h in (m.headers() or [])]

    columns = {"topic": [m.topic() for m in msgs], "partition": [m.partition() for m in msgs],
               "offset": [m.offset() for m in msgs], "timestamp": [stamp(m) for m in msgs],
               "key": [m.key() for m in msgs], "value": [m.value() for m in msgs],
               "headers": [headers(m) for m in msgs]}
    return pa.RecordBatch.from_pydict(columns, RAW_SCHEMA)
