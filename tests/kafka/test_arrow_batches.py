"""Arrow batches from confluent-kafka messages: gaps in offsets, missing timestamps, the schema Spark takes."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, KafkaError, Message

from app.spark.tasks import spark_arrow_schema
from spouts.kafka.arrow import SCHEMA, schema_of, to_batch
from spouts.kafka.reader import _last_offset_within

T0 = 1_700_000_000_123


def message(offset: int, ts: int | None = T0, error: KafkaError | None = None) -> Message:
    stamp = (TIMESTAMP_CREATE_TIME, ts) if ts is not None else (TIMESTAMP_NOT_AVAILABLE, 0)
    return Message(topic="t", partition=2, offset=offset, key=b"k%d" % offset, value=b"v%d" % offset,
                   timestamp=stamp, headers=None, error=error)


def test_the_raw_schema_is_what_spark_takes_so_no_batch_is_cast() -> None:
    assert spark_arrow_schema(SCHEMA).equals(SCHEMA)


def test_offsets_with_and_without_gaps_and_missing_timestamps() -> None:
    for offsets in ([5, 6, 7, 8], [5, 7, 8, 11]):  # a range, and one with gaps (markers, compaction)
        msgs = [message(o, None if o == 7 else T0 + o) for o in offsets]
        batch = to_batch("t", 2, msgs)
        assert batch.schema.equals(SCHEMA)
        rows = batch.to_pylist()
        assert [r["offset"] for r in rows] == offsets
        assert [r["partition"] for r in rows] == [2] * 4
        assert [r["topic"] for r in rows] == ["t"] * 4
        assert [r["value"] for r in rows] == [b"v%d" % o for o in offsets]
        expected = [None if o == 7 else datetime.fromtimestamp((T0 + o) / 1000, UTC) for o in offsets]
        assert [r["timestamp"] for r in rows] == expected
        assert [r["headers"] for r in rows] == [[]] * 4
    assert batch.column("timestamp").type == pa.timestamp("us", tz="UTC")


def test_a_chunk_is_taken_whole_only_when_every_message_is_a_record_inside_the_range() -> None:
    chunk = [message(o) for o in range(10, 14)]
    assert _last_offset_within(chunk, 10, 20) == 13
    assert _last_offset_within(chunk, 11, 20) is None  # starts before the position: the loop filters
    assert _last_offset_within(chunk, 10, 13) is None  # reaches the range's end: the loop stops there
    eof = message(14, error=KafkaError(KafkaError._PARTITION_EOF))
    assert _last_offset_within([*chunk, eof], 10, 20) is None  # an event: the loop handles it
    assert _last_offset_within([], 10, 20) is None


def test_a_batch_of_some_columns_holds_what_the_whole_batch_holds_in_them() -> None:
    msgs = [message(o, None if o == 7 else T0 + o) for o in (5, 7, 8, 11)]
    whole = to_batch("t", 2, msgs)
    for columns in (["topic", "partition", "offset", "value"], ["offset", "timestamp"], ["headers", "key", "offset"]):
        some = to_batch("t", 2, msgs, schema_of(columns))
        assert some.schema.names == [n for n in SCHEMA.names if n in columns]  # the schema's order, not the asked one
        assert some.equals(whole.select(some.schema.names))
    with pytest.raises(ValueError, match="not a column of a Kafka record: vlaue"):
        schema_of(["offset", "vlaue"])
