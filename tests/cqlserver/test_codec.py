"""Codec layers checked against the DataStax driver's own encoders/decoders."""

from __future__ import annotations

import datetime  # noqa: ICN001  the module's own name
import decimal
import io
import uuid

import pytest
from cassandra import cqltypes
from cassandra.segment import SegmentCodec

from tests.cqlserver.cql import ast, parse
from tests.cqlserver.errors import SyntaxError_
from tests.cqlserver.framing import EnvelopeDecoder, encode_envelope, encode_segments
from tests.cqlserver.types import parse_type

CASES = [
    ("text", "héllo ☃", cqltypes.UTF8Type, None),
    ("ascii", "plain", cqltypes.AsciiType, None),
    ("bigint", -(2 ** 63), cqltypes.LongType, None),
    ("int", 2 ** 31 - 1, cqltypes.Int32Type, None),
    ("smallint", -32768, cqltypes.ShortType, None),
    ("tinyint", -128, cqltypes.ByteType, None),
    ("double", 1.5e300, cqltypes.DoubleType, None),
    ("float", 0.25, cqltypes.FloatType, None),
    ("boolean", True, cqltypes.BooleanType, None),
    ("blob", b"\x00\xff", cqltypes.BytesType, None),
    ("uuid", uuid.UUID("12345678-1234-5678-1234-567812345678"), cqltypes.UUIDType, None),
    ("timeuuid", uuid.uuid1(), cqltypes.TimeUUIDType, None),
    ("varint", -129, cqltypes.IntegerType, None),
    ("varint", 2 ** 80, cqltypes.IntegerType, None),
    ("decimal", decimal.Decimal("-123.4500"), cqltypes.DecimalType, None),
    ("timestamp", 1_700_000_000_123, cqltypes.DateType,
     datetime.datetime(2023, 11, 14, 22, 13, 20, 123000)),
    ("inet", "10.1.2.3", cqltypes.InetAddressType, None),
]


@pytest.mark.parametrize(("type_name", "value", "driver_type", "driver_value"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_types_encode_like_the_driver(type_name, value, driver_type, driver_value):
    ours = parse_type(type_name)
    expected = driver_type.serialize(value if driver_value is None else driver_value, 4)
    assert ours.encode(value) == expected
    assert ours.decode(expected) == value


def test_collection_types_round_trip_through_driver():
    t = parse_type("frozen<map<text, frozen<set<int>>>>")
    assert t.name == "frozen<map<text, frozen<set<int>>>>"
    value = {"b": frozenset({3, 1}), "a": frozenset()}
    driver = cqltypes.lookup_casstype("MapType(UTF8Type, SetType(Int32Type))")
    decoded = driver.deserialize(t.encode(value), 4)
    assert {k: set(v) for k, v in decoded.items()} == {"a": set(), "b": {1, 3}}
    assert t.decode(driver.serialize(value, 4)) == value


def test_segments_are_readable_by_driver_codec_and_back():
    payload = encode_envelope(5, 7, 0x08, b"x" * 300_000)  # > 2 segments
    wire = encode_segments(payload)
    codec = SegmentCodec()
    buf, out = io.BytesIO(wire), b""
    while buf.tell() < len(wire):
        header = codec.decode_header(buf)
        assert header.is_self_contained is False
        out += codec.decode(buf, header).payload
    assert out == payload

    driver_wire = io.BytesIO()
    codec.encode(driver_wire, encode_envelope(5, 3, 0x07, b"hello")[:9] + b"hello")
    decoder = EnvelopeDecoder()
    decoder.enable_segments()
    raw = driver_wire.getvalue()
    decoder.feed(raw[:5])
    assert decoder.next_envelope() is None  # partial segment header
    decoder.feed(raw[5:])
    env = decoder.next_envelope()
    assert env is not None
    assert env.stream == 3
    assert env.body == b"hello"


def test_corrupted_segment_is_rejected():
    wire = bytearray(encode_segments(b"abc" * 10))
    wire[-1] ^= 0xFF
    decoder = EnvelopeDecoder()
    decoder.enable_segments()
    decoder.feed(bytes(wire))
    with pytest.raises(Exception, match="CRC mismatch"):
        decoder.next_envelope()


def test_parser_handles_quoting_escapes_and_markers():
    parsed = parse('update "MixedKs"."Tbl" USING TTL ? SET "Val" = \'it\'\'s\', n = :n '
                   'WHERE pk = ? AND ck >= 3 IF "Val" != null AND n < ?;')
    stmt = parsed.statement
    assert isinstance(stmt, ast.Update)
    assert (stmt.table.keyspace, stmt.table.name) == ("MixedKs", "Tbl")
    assert stmt.assignments[0] == ("Val", ast.Literal("string", "it's"))
    assert stmt.assignments[1] == ("n", ast.Marker(1, "n"))
    assert stmt.ttl == ast.Marker(0)
    assert [c.op for c in stmt.conditions] == ["!=", "<"]
    assert parsed.marker_count == 4


def test_parser_create_table_forms():
    stmt = parse("CREATE TABLE IF NOT EXISTS t (a int, b text, c bigint static, d frozen<map<text, int>>, "
                 "PRIMARY KEY ((a, b), c2)) WITH CLUSTERING ORDER BY (c2 DESC) AND comment = 'x'").statement
    assert isinstance(stmt, ast.CreateTable)
    assert stmt.partition_key == ["a", "b"]
    assert stmt.clustering == ["c2"]
    assert stmt.clustering_order == {"c2": False}
    assert stmt.columns[3].type == "frozen<map<text,int>>"
    inline = parse("create table t (id uuid PRIMARY KEY, v text)").statement
    assert isinstance(inline, ast.CreateTable)
    assert inline.partition_key == ["id"]


@pytest.mark.parametrize("bad", ["SELEC * FROM t", "SELECT * FROM t WHERE", "INSERT INTO t (a) VALUES (1, 2)",
                                 "SELECT * FROM t WHERE (a, b) > (1, 2)", "ALTER TABLE t ADD x int",
                                 "UPDATE t SET c = c + 1 WHERE k = 1"])
def test_parser_rejects_outside_subset(bad):
    with pytest.raises(SyntaxError_):
        parse(bad)
