"""KafkaSpout.read_arrow over a real read (mock cluster): decoded batches in the decoded schema, bad
records reported with the coordinates the broker gave them, the resolved decoder shipped in a pickle."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from spouts.bad_records import BadRecordError
from spouts.kafka import SCHEMA, KafkaSpout
from spouts.kafka.formats import RecordFormat
from spouts.metadata import PartitionMetadata
from tests.kafka.formats.helpers import Collected
from tests.kafka.helpers import config, produce


def test_read_arrow_decodes_and_reports_bad_records(kafka_cluster: Any) -> None:
    kafka_cluster.create_topic("sales", 2)
    values = [json.dumps({"store": f"s{i % 3}", "amount": i}).encode() for i in range(30)]
    values[4], values[21] = b"{broken", b'{"store": "x", "amount": "many"}'
    acked = produce(kafka_cluster.bootstrap_servers(), "sales", [(1, v) for v in values], key=b"k")
    spout = KafkaSpout(replace(config(kafka_cluster.bootstrap_servers(), topics=["sales"]), key_format=RecordFormat.of("string"),
                               value_format=RecordFormat.of({"type": "json", "fields": {"store": "string", "amount": "int"}})),
                       "formats")
    assert spout.arrow_schema.field("key").type == pa.string()
    assert spout.arrow_schema.field("value").type == pa.struct([("store", pa.string()), ("amount", pa.int32())])
    shipped = pickle.loads(pickle.dumps(spout))
    meta = PartitionMetadata("sales", 1, acked[0].offset, acked[-1].offset + 1, len(acked), "formats")
    bad = Collected()
    batches = list(shipped.read_arrow(meta, batch_size=8, on_bad=bad))
    assert all(b.schema.equals(spout.arrow_schema) for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [(r.topic, r.partition, r.offset, r.reason) for r in bad] == [
        ("sales", 1, acked[4].offset, "json_invalid"), ("sales", 1, acked[21].offset, "json_type")]
    assert [r["offset"] for r in rows] == [a.offset for i, a in enumerate(acked) if i not in (4, 21)]
    assert [r["value"]["amount"] for r in rows] == [i for i in range(30) if i not in (4, 21)]
    assert {r["key"] for r in rows} == {"k"}
    with pytest.raises(BadRecordError, match=rf"sales\[1\]@{acked[4].offset}"):
        list(shipped.read_arrow(meta, batch_size=8))


def test_bytes_formats_leave_the_raw_path_alone(kafka_cluster: Any) -> None:
    spout = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topics=["t"]), "raw")
    assert spout.decoder is None
    assert spout.arrow_schema is SCHEMA


def test_a_read_of_some_columns_still_decodes_a_key_that_may_fail_and_leaves_its_bad_records_out(
        kafka_cluster: Any) -> None:
    """The sinks read the value only: the string keys are decoded all the same, so a key that is not UTF-8
    leaves its record out and reports it, as a read of every column does; the batches hold the asked columns."""
    kafka_cluster.create_topic("keyed", 1)
    bootstrap = kafka_cluster.bootstrap_servers()
    acked = [*produce(bootstrap, "keyed", [(0, b"a"), (0, b"b")], key=b"good"),
             *produce(bootstrap, "keyed", [(0, b"c")], key=b"\xff\xfe"),
             *produce(bootstrap, "keyed", [(0, b"d")], key=b"fine")]
    spout = KafkaSpout(replace(config(bootstrap, topics=["keyed"]), key_format=RecordFormat.of("string")), "some")
    meta = PartitionMetadata("keyed", 0, acked[0].offset, acked[-1].offset + 1, len(acked), "some")
    asked = ("topic", "partition", "offset", "value")
    assert spout.decoder is not None
    assert spout.decoder.raw_columns(asked) == ["topic", "partition", "offset", "key", "value"]
    for columns in (None, asked):
        bad = Collected()
        batches = list(spout.read_arrow(meta, batch_size=2, on_bad=bad, columns=columns))
        assert all(b.schema.names == list(columns or spout.arrow_schema.names) for b in batches)
        assert [r["value"] for b in batches for r in b.to_pylist()] == [b"a", b"b", b"d"]
        assert [r.offset for r in bad] == [acked[2].offset]
        assert bad[0].message.startswith("key: ")
    raw = KafkaSpout(config(bootstrap, topics=["keyed"]), "raw")  # bytes never fail: the key is not read at all
    batches = list(raw.read_arrow(meta, columns=asked))
    assert batches
    assert all(b.schema.names == list(asked) for b in batches)
