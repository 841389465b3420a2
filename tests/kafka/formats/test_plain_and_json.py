"""bytes, string and JSON with declared types: good records become typed columns, bad ones are
reported with their coordinates and reason and left out, null values (tombstones) stay null."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spouts.bad_records import BadRecordError, Stage
from spouts.kafka.arrow import SCHEMA
from spouts.kafka.formats import BatchDecoder, JsonDecoder, RecordFormat, StringDecoder, decoded_schema, resolve
from tests.kafka.formats.helpers import Collected, raw_batch

FIELDS = (("user", "string"), ("amount", "bigint"), ("price", "decimal(10,2)"), ("ok", "boolean"),
          ("at", "timestamp"), ("day", "date"), ("ratio", "double"))


def decoder(value: RecordFormat | str, key: RecordFormat | str = "bytes") -> BatchDecoder:
    k, v = resolve(RecordFormat.of(key), ("t",), "key", None), resolve(RecordFormat.of(value), ("t",), "value", None)
    return BatchDecoder(k, v, decoded_schema(SCHEMA, k, v))


def test_bytes_and_string_keep_metadata_columns_and_nulls() -> None:
    raw = raw_batch([b"a", None, "é".encode()], keys=[b"k1", b"k2", None])
    out = decoder("string", key="string").decode(raw, None)
    assert out.schema.field("value").type == pa.string()
    assert out.schema.field("key").type == pa.string()
    assert out.column("value").to_pylist() == ["a", None, "é"]
    assert out.column("key").to_pylist() == ["k1", "k2", None]
    for name in ("topic", "partition", "offset", "timestamp", "headers"):
        assert out.column(name).equals(raw.column(name))
    assert decoder("bytes").decode(raw, None).column("value").to_pylist() == [b"a", None, "é".encode()]


def test_string_reports_invalid_utf8_with_coordinates() -> None:
    bad = Collected()
    out = decoder("string").decode(raw_batch([b"ok", b"\xff\xfe", b"fine"], first_offset=7), bad)
    assert out.column("value").to_pylist() == ["ok", "fine"]
    assert out.column("offset").to_pylist() == [7, 9]
    [r] = bad
    assert (r.topic, r.partition, r.offset, r.stage, r.reason) == ("t", 2, 8, Stage.DECODE, "utf8_invalid")
    assert r.message.startswith("value: ")


def test_json_declared_types_become_typed_columns() -> None:
    docs = [{"user": "u1", "amount": 5, "price": "12.50", "ok": True, "at": "2024-03-01T10:00:00Z",
             "day": "2024-03-01", "ratio": 0.5, "extra": [1, 2]},
            {"user": "u2", "amount": -3},  # missing fields are null
            None]  # a tombstone stays a null value, not a bad record
    raw = raw_batch([json.dumps(d).encode() if d is not None else None for d in docs])
    bad = Collected()
    out = decoder(RecordFormat.of({"type": "json", "fields": dict(FIELDS)})).decode(raw, bad)
    assert bad == []
    assert out.schema.field("value").type == pa.struct([("user", pa.string()), ("amount", pa.int64()),
                                                        ("price", pa.decimal128(10, 2)), ("ok", pa.bool_()),
                                                        ("at", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
                                                        ("ratio", pa.float64())])
    rows = out.column("value").to_pylist()
    assert rows[0] == {"user": "u1", "amount": 5, "price": Decimal("12.50"), "ok": True,
                       "at": dt.datetime(2024, 3, 1, 10, tzinfo=dt.UTC), "day": dt.date(2024, 3, 1),
                       "ratio": 0.5}
    assert rows[1] == {"user": "u2", "amount": -3, "price": None, "ok": None, "at": None, "day": None, "ratio": None}
    assert rows[2] is None


@pytest.mark.parametrize(("value", "reason"), [
    (b'{"user": "u", "amount": 1', "json_invalid"),  # truncated
    (b"not json at all", "json_invalid"),
    (b"\xff\xfe", "json_invalid"),
    (b"", "json_invalid"),
    (b"[1, 2]", "json_not_object"),
    (b"42", "json_not_object"),
    (b'{"user": "u", "amount": "many"}', "json_type"),  # a string where a bigint is declared
    (b'{"user": "u", "amount": 1.5}', "json_type"),
    (b'{"user": "u", "amount": 1}{"user": "v", "amount": 2}', "json_invalid"),  # two objects in one record
])
def test_json_bad_record_is_isolated_and_reported(value: bytes, reason: str) -> None:
    good = [json.dumps({"user": f"u{i}", "amount": i}).encode() for i in range(40)]
    values = [*good[:17], value, *good[17:], b'{"user":\n "multi-line", "amount": 9}']
    bad = Collected()
    out = decoder(RecordFormat.of({"type": "json", "fields": {"user": "string", "amount": "bigint"}})).decode(
        raw_batch(values, first_offset=1000, topic="sales", partition=4), bad)
    assert [(r.topic, r.partition, r.offset, r.stage, r.reason) for r in bad] == [("sales", 4, 1017, Stage.DECODE, reason)]
    assert out.num_rows == 41
    assert 1017 not in out.column("offset").to_pylist()
    assert [v["amount"] for v in out.column("value").to_pylist()] == [*range(40), 9]


def test_json_many_bad_records_in_offset_order_and_bad_key() -> None:
    values = [b'{"n": 1}', b"x", b'{"n": 2}', b'{"n": "y"}', b"z", b'{"n": 3}']
    keys = [b"1", b"2", b"oops", b"4", b"5", b"6"]
    bad = Collected()
    out = decoder(RecordFormat.of({"type": "json", "fields": {"n": "int"}}),
                  key=RecordFormat.of({"type": "json", "fields": {"id": "int"}})).decode(raw_batch(values, keys), bad)
    # keys "1", "2"... are JSON numbers, not objects: every key is bad; the key is named in the message
    assert [r.offset for r in bad] == [100, 101, 102, 103, 104, 105]
    assert all(r.message.startswith("key: ") for r in bad)
    assert out.num_rows == 0
    bad.clear()
    out = decoder(RecordFormat.of({"type": "json", "fields": {"n": "int"}})).decode(raw_batch(values, keys), bad)
    assert bad.by_offset() == {101: "json_invalid", 103: "json_type", 104: "json_invalid"}
    assert out.column("value").to_pylist() == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_without_on_bad_a_bad_record_raises_with_its_coordinates() -> None:
    with pytest.raises(BadRecordError, match=r"t\[2\]@101 \(decode\): json_invalid"):
        decoder(RecordFormat.of({"type": "json", "fields": {"n": "int"}})).decode(raw_batch([b'{"n":1}', b"{"]), None)


def test_all_null_and_empty_batches() -> None:
    d = JsonDecoder((("n", "int"),))
    assert d.decode(pa.array([None, None], pa.binary())).array.to_pylist() == [None, None]
    assert d.decode(pa.array([], pa.binary())).array.to_pylist() == []
    assert StringDecoder().decode(pa.array([None], pa.binary())).array.to_pylist() == [None]


@pytest.mark.parametrize(("spec", "message"), [
    ({"type": "json"}, "needs fields"),
    ({"type": "json", "fields": {"n": "integer"}}, "unknown field type 'integer'"),
    ({"type": "json", "fields": {"bad name": "int"}}, "a field name is"),
    ({"type": "string", "fields": {"n": "int"}}, "json only"),
    ({"type": "string", "subject": "s"}, "registry format"),
    ({"type": "avro", "version": 1, "schema_id": 3}, "at most one"),
    ({"type": "xml"}, "'xml' is not a valid FormatType"),
])
def test_bad_format_specs_are_refused(spec: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecordFormat.of(spec)


def test_json_many_bad_records_mixed_through_a_batch_are_each_found() -> None:
    import random

    rng = random.Random(3)
    kinds = {"json_invalid": b"{oops", "json_not_object": b"[1]", "json_type": b'{"n": "x"}'}
    values, expected = [], {}
    for i in range(400):
        if rng.random() < 0.2:
            reason = rng.choice(sorted(kinds))
            values.append(kinds[reason])
            expected[100 + i] = reason
        else:
            values.append(json.dumps({"n": i}).encode())
    bad = Collected()
    out = decoder(RecordFormat.of({"type": "json", "fields": {"n": "int"}})).decode(raw_batch(values), bad)
    assert bad.by_offset() == expected
    assert len(expected) > 50
    assert [v["n"] for v in out.column("value").to_pylist()] == [o - 100 for o in range(100, 500) if o not in expected]


_POOL = [b'{"n": 1}', b'{"n": 2}', b"{oops", b"{oops}", b"[1]", b'{"n": "x"}', b'{"n": 1}{"n": 2}', b'  {"n": 3}\n',
         b"\xff{", b"{\xff}", b"", b"42", b'{"n": 1.5}', b'{"n":\n 4}', b"not json"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_POOL), min_size=1, max_size=60))
def test_a_json_value_is_bad_for_the_same_reason_and_message_whatever_batch_it_is_in(values: list[bytes]) -> None:
    """The reason and message a dead letter carries depend on the value alone: decoded in any batch, each value
    is judged as when decoded by itself."""
    fmt = RecordFormat.of({"type": "json", "fields": {"n": "int"}})

    def judged(batch: list[bytes]) -> list[tuple[str, str] | None]:
        bad = Collected()
        decoder(fmt).decode(raw_batch(batch), bad)
        found = {r.offset: (r.reason, r.message) for r in bad}
        return [found.get(100 + i) for i in range(len(batch))]

    assert judged(values) == [judged([v])[0] for v in values]


def test_a_value_of_two_objects_beside_a_blank_one_is_not_taken_for_two_good_records() -> None:
    """Parsed together, ``{..}{..}`` and a blank value give as many rows as values: both are bad all the same
    (the blank value is never parsed with others), and the good record keeps its own row."""
    bad = Collected()
    out = decoder(RecordFormat.of({"type": "json", "fields": {"n": "int"}})).decode(
        raw_batch([b'{"n": 1}{"n": 2}', b"  ", b'{"n": 3}']), bad)
    assert bad.by_offset() == {100: "json_invalid", 101: "json_invalid"}
    assert out.column("value").to_pylist() == [{"n": 3}]


def test_values_the_reader_refuses_together_but_reads_alone_are_each_taken_as_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Should Arrow's reader refuse good values together that it reads one by one, the batch is not failed
    (a failure would be retried for ever): each value is taken as it is alone, the same on every replay."""
    from spouts.kafka.formats import json_fields

    alone = json_fields.JsonObjects._try

    def refuses_runs(self: json_fields.JsonObjects, dense: pa.Array) -> Any:
        return alone(self, dense) if len(dense) == 1 else (None, json_fields._Refused("refused together", False))

    monkeypatch.setattr(json_fields.JsonObjects, "_try", refuses_runs)
    values = [b'{"n": 1}', b"{oops", b'{"n": 2}', None, b'{"n": "x"}', b'{"n": 3}']
    bad = Collected()
    out = decoder(RecordFormat.of({"type": "json", "fields": {"n": "int"}})).decode(raw_batch(values), bad)
    assert bad.by_offset() == {101: "json_invalid", 104: "json_type"}
    assert out.column("value").to_pylist() == [{"n": 1}, {"n": 2}, None, {"n": 3}]
