"""No value crashes a decoder's process or fails its batch: fuzzed values of every format (plain, JSON
with declared fields, Avro, Protobuf and JSON Schema through the test Schema Registry peer) each decode
or become a bad record with a reason, judged alike alone and beside other good and bad values. The
decoding runs in another process (:mod:`tests.kafka.formats.fuzz`), so a crash fails a test; the named
traps of JSON (``null``, byte-order marks, deep nesting, huge numbers, NaN, duplicate keys, invalid
UTF-8, top-level arrays and scalars, empty values) are cases of their own."""

from __future__ import annotations

import io
import json
import struct
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import pytest
from confluent_kafka.schema_registry import Schema
from hypothesis import given
from hypothesis import strategies as st

from spouts.kafka.formats import BytesDecoder, JsonDecoder, RecordFormat, RegistrySettings, StringDecoder, resolve
from tests.kafka.formats.fuzz import FUZZ, Crashed, DecodingProcess, check
from tests.schemaregistry.server import SchemaRegistryServer

BOM = "\ufeff".encode()
FIELDS = (("n", "int"), ("s", "string"), ("d", "double"), ("ok", "boolean"), ("p", "decimal(10,2)"), ("day", "date"),
          ("at", "timestamp"))
JSON = JsonDecoder(FIELDS)
DEEP = 5_000


@pytest.fixture(scope="module")
def process() -> Iterator[DecodingProcess]:
    p = DecodingProcess()
    yield p
    p.close()


# --- JSON with declared fields -------------------------------------------------------------------------------------

def _good_doc() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "n": st.integers(-(2**31), 2**31 - 1), "s": st.text(max_size=8), "d": st.floats(allow_nan=False, width=64),
        "ok": st.booleans(), "p": st.decimals(-99_999_999, 99_999_999, places=2, allow_nan=False, allow_infinity=False)
        .map(str), "day": st.dates().map(str), "x": st.text(max_size=4)})


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                         max_size=3), max_leaves=8)
NASTY = [b"null", b" null ", b"\n", b"", b"  ", BOM, BOM + BOM + b'{"n": 1}', BOM + b'{"n": 1}', b'\xef\xbb{"n": 1}',
         b"[" * DEEP + b"]" * DEEP, b'{"x": ' + b"[" * DEEP + b"]" * DEEP + b', "n": 1}', b'{"n": 1e400}',
         b'{"d": NaN}', b'{"d": -Infinity}', b'{"n": NaN}', b'{"n": 1, "n": 2}', b'{"x": 1, "x": 2}', b'{"s": "\xff"}',
         b'{"x": "\xc3"}', b"[1]", b'[{"n": 1}]', b"1", b'"s"', b"true", b'{"n": 1}\nnull', b'{"n": 1} null {"n": 2}',
         b'{"n": 1}{"n": 2}', b'{"n":\n 4}', b'{"n": 1}\r\n', b"\x00", b'{"n": 99999999999999999999}']


def _mutated(value: bytes, at: int, insert: bytes) -> bytes:
    at = at % (len(value) + 1)
    return value[:at] + insert + value[at:]


_json_value = st.one_of(
    _good_doc().map(lambda d: json.dumps(d).encode()),
    st.sampled_from(NASTY),
    st.binary(max_size=24),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(_mutated, _good_doc().map(lambda d: json.dumps(d).encode()), st.integers(0, 64),
              st.sampled_from([BOM, b"null", b"\n", b"\xff", b"}", b"{", b'"', b",", b" null\n", b"NaN"])),
    st.none())


@FUZZ
@given(st.lists(_json_value, min_size=1, max_size=12))
def test_json_values_decode_or_are_bad_alike_alone_and_in_a_batch(process: DecodingProcess,
                                                                  values: list[bytes | None]) -> None:
    check(process, JSON, values)


GOOD = [b'{"n": 7}', b'{"s": "a", "n": 8}']
BAD = [b"{oops", b'{"n": "x"}']


@pytest.mark.parametrize(("value", "expected"), [
    (b"null", "json_not_object"),
    (b" null\n", "json_not_object"),
    (BOM + b'{"n": 1}', {"n": 1}),
    (BOM + b' {"n": 1} ', {"n": 1}),
    (BOM + BOM + b'{"n": 1}', "json_invalid"),  # one mark is dropped, as Python's parser does
    (b' \xef\xbb\xbf{"n": 1}', "json_invalid"),  # a mark that does not start the value is garbage
    (BOM, "json_invalid"),
    (b"[" * DEEP + b"]" * DEEP, "json_invalid"),
    (b'{"x": ' + b"[" * DEEP + b"]" * DEEP + b', "n": 1}', {"n": 1}),  # deep, in a field not declared
    (b'{"n": ' + b"[" * DEEP + b"]" * DEEP + b"}", "json_invalid"),
    (b'{"n": 1e400}', "json_type"),
    (b'{"n": 99999999999999999999}', "json_type"),
    (b'{"d": 1e308, "n": 2}', {"n": 2, "d": 1e308}),
    (b'{"d": NaN}', "row"),
    (b'{"d": Infinity, "n": 3}', {"n": 3, "d": float("inf")}),
    (b'{"n": NaN}', "json_type"),
    (b'{"n": 1, "n": 2}', "json_invalid"),  # a declared key twice
    (b'{"x": 1, "x": 2, "n": 5}', {"n": 5}),  # a key not declared may appear twice
    (b'{"x": 1e400, "n": 1}', "json_type"),  # beyond a double, even in a field not declared: Arrow's reader refuses it
    (b'{"s": "\xff"}', "json_invalid"),  # invalid UTF-8 in a declared string
    (b'{"s": "\xc3\xa9", "n": 4}', {"n": 4, "s": "é"}),
    (b"[1]", "json_not_object"),
    (b'[{"n": 1}]', "json_not_object"),
    (b"42", "json_not_object"),
    (b'"text"', "json_not_object"),
    (b"true", "json_not_object"),
    (b"", "json_invalid"),
    (b" \n ", "json_invalid"),
    (b'{"n": 1}\nnull', "json_invalid"),
    (b'{"n": 1} null {"n": 2}', "json_invalid"),
], ids=lambda v: repr(v)[:40] if isinstance(v, bytes) else None)
@pytest.mark.parametrize("at", ["alone", "first", "middle", "last"])
def test_named_json_traps_decode_or_are_bad_with_a_reason_alike_at_any_position(
        process: DecodingProcess, value: bytes, expected: str | dict[str, Any], at: str) -> None:
    """Each trap is judged as alone wherever it stands beside good and bad values; never a crash, never an error."""
    around = [*GOOD, None, *BAD]
    placed: dict[str, list[bytes | None]] = {"alone": [value], "first": [value, *around],
                                             "middle": [*around[:3], value, *around[3:]], "last": [*around, value]}
    values = placed[at]
    verdict = check(process, JSON, values)[values.index(value)]
    if isinstance(expected, dict):
        row = {name: None for name, _ in FIELDS} | expected
        assert verdict == ("row", repr(row))
    elif expected == "row":
        assert verdict[0] == "row"
    else:
        assert verdict[:2] == ("bad", expected), verdict


def test_a_process_that_dies_is_a_test_failure_not_a_lost_runner(process: DecodingProcess) -> None:
    """The harness tells a crash: a decoder that aborts its process raises Crashed, and the next batch gets a new one."""
    with pytest.raises(Crashed, match="exit"):
        process.decode(_Aborts(), [[b"x"]])
    check(process, JSON, [b'{"n": 1}'])


class _Aborts:
    """A decoder whose process dies as under a segmentation fault."""

    def decode(self, values: Any) -> Any:
        import os

        os.abort()


# --- bytes and string ----------------------------------------------------------------------------------------------

@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=16), st.text(max_size=8).map(str.encode), st.none()), max_size=12))
def test_bytes_and_string_values_decode_or_are_bad_alike_alone_and_in_a_batch(process: DecodingProcess,
                                                                              values: list[bytes | None]) -> None:
    assert all(v[0] == "row" for v in check(process, BytesDecoder(), values))
    for v, verdict in zip(values, check(process, StringDecoder(), values), strict=False):
        assert (verdict[0] == "bad") == (v is not None and not _utf8(v))


def _utf8(v: bytes) -> bool:
    try:
        v.decode()
    except UnicodeDecodeError:
        return False
    return True


# --- Avro, Protobuf and JSON Schema through the Schema Registry peer -----------------------------------------------

AVRO = {"type": "record", "name": "Sale", "namespace": "fuzz", "fields": [
    {"name": "store", "type": "string"}, {"name": "amount", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tags", "type": {"type": "array", "items": "int"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["SALE", "REFUND"]}}]}
JSON_SCHEMA = {"type": "object", "properties": {"store": {"type": "string"}, "amount": {"type": "integer"},
                                                "tags": {"type": "array", "items": {"type": "number"}}}}


class Registered:
    """The three registry decoders over the test peer, and the ids of their schemas (each other's too)."""

    def __init__(self, server: SchemaRegistryServer) -> None:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        from tests.kafka.formats.test_protobuf import sale_class

        self.registry = RegistrySettings(server.url)
        client, topic = self.registry.client(), f"fuzz-{uuid.uuid4().hex[:8]}"
        self.avro_id = client.register_schema(f"{topic}-a-value", Schema(json.dumps(AVRO), "AVRO"))
        self.json_id = client.register_schema(f"{topic}-j-value", Schema(json.dumps(JSON_SCHEMA), "JSON"))
        self.proto_class = sale_class(1)
        serialize = ProtobufSerializer(self.proto_class, client, {"use.deprecated.format": False})
        self.proto_sample = serialize(self.proto_class(store="s", amount=1),
                                      SerializationContext(f"{topic}-p", MessageField.VALUE))
        self.proto_id = struct.unpack(">I", self.proto_sample[1:5])[0]
        self.ids = [self.avro_id, self.json_id, self.proto_id, 987_654]
        self.avro = resolve(RecordFormat.of("avro"), (f"{topic}-a",), "value", self.registry)
        self.protobuf = resolve(RecordFormat.of("protobuf"), (f"{topic}-p",), "value", self.registry)
        self.json_schema = resolve(RecordFormat.of("json_schema"), (f"{topic}-j",), "value", self.registry)


@pytest.fixture(scope="module")
def registered(registry_server: SchemaRegistryServer) -> Registered:
    return Registered(registry_server)


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def _avro_payload(doc: dict[str, Any]) -> bytes:
    from fastavro import parse_schema, schemaless_writer

    out = io.BytesIO()
    schemaless_writer(out, parse_schema(AVRO), doc)
    return out.getvalue()


_avro_doc = st.fixed_dictionaries({
    "store": st.text(max_size=6), "amount": st.integers(-(2**63), 2**63 - 1), "note": st.none() | st.text(max_size=4),
    "price": st.decimals(-9999, 9999, places=2, allow_nan=False, allow_infinity=False),
    "day": st.dates(), "tags": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3),
    "kind": st.sampled_from(["SALE", "REFUND"])})


def _registry_values(registered: Registered, good: st.SearchStrategy[bytes]) -> st.SearchStrategy[list[bytes | None]]:
    """Good framed payloads, the same mutated, any payload under any id (its own schema's, another format's,
    one the registry does not know), unframed bytes, nulls."""
    ids = st.sampled_from(registered.ids)
    payloads = st.one_of(st.binary(max_size=24), st.sampled_from(NASTY), good.map(lambda v: v[5:]),
                         st.builds(lambda v, n: v[5:][:n], good, st.integers(0, 30)),
                         st.builds(lambda v, at, b: _mutated(v[5:], at, b), good, st.integers(0, 40), st.binary(max_size=3)))
    value = st.one_of(good, st.builds(_framed, ids, payloads), st.binary(max_size=8), st.none())
    return st.lists(value, min_size=1, max_size=10)


@FUZZ
@given(data=st.data())
def test_avro_values_decode_or_are_bad_alike_alone_and_in_a_batch(process: DecodingProcess, registered: Registered,
                                                                  data: st.DataObject) -> None:
    good = _avro_doc.map(lambda d: _framed(registered.avro_id, _avro_payload(d)))
    check(process, registered.avro, data.draw(_registry_values(registered, good)))


@FUZZ
@given(data=st.data())
def test_protobuf_values_decode_or_are_bad_alike_alone_and_in_a_batch(process: DecodingProcess, registered: Registered,
                                                                      data: st.DataObject) -> None:
    sample = registered.proto_sample
    cls = registered.proto_class
    good = st.builds(lambda store, amount, kind, tags: sample[:6] + cls(store=store, amount=amount, kind=kind,
                                                                         tags=tags).SerializeToString(),
                     st.text(max_size=6), st.integers(-(2**63), 2**63 - 1), st.integers(0, 3),
                     st.lists(st.text(max_size=3), max_size=3))
    check(process, registered.protobuf, data.draw(_registry_values(registered, good)))


@FUZZ
@given(data=st.data())
def test_json_schema_values_decode_or_are_bad_alike_alone_and_in_a_batch(process: DecodingProcess,
                                                                         registered: Registered,
                                                                         data: st.DataObject) -> None:
    doc = st.fixed_dictionaries({}, optional={"store": st.text(max_size=6), "amount": st.integers(-(2**63), 2**63 - 1),
                                              "tags": st.lists(st.floats(allow_nan=False), max_size=3)})
    good = st.one_of(doc.map(lambda d: _framed(registered.json_id, json.dumps(d).encode())),
                     _json_value.filter(lambda v: v is not None).map(lambda v: _framed(registered.json_id, v)))
    check(process, registered.json_schema, data.draw(_registry_values(registered, good)))


def _wide_price() -> bytes:
    """A Sale whose price (decimal(6,2)) holds eight digits: fastavro reads it, Arrow's column cannot hold it."""
    fields = cast(list[dict[str, Any]], AVRO["fields"])
    wide = {**AVRO, "fields": [f if f["name"] != "price" else {**f, "type": {**f["type"], "precision": 12}}
                               for f in fields]}
    from fastavro import parse_schema, schemaless_writer

    out = io.BytesIO()
    schemaless_writer(out, parse_schema(wide), {"store": "s", "amount": 1, "note": None, "price": Decimal("123456.78"),
                                                "day": 1, "tags": [], "kind": "SALE"})
    return out.getvalue()


@pytest.mark.parametrize("case", ["json_schema_id", "protobuf_id", "wide_decimal"])
def test_named_avro_traps_are_bad_records_not_a_failed_batch(process: DecodingProcess, registered: Registered,
                                                             case: str) -> None:
    """A record framed with another format's schema id, or holding a decimal wider than its column, is a bad
    record; the batch around it decodes (it raised before, and a batch that raises is retried for ever)."""
    good = _framed(registered.avro_id, _avro_payload({"store": "s", "amount": 2, "note": None, "price": Decimal("1.50"),
                                                      "day": 3, "tags": [1], "kind": "REFUND"}))
    value = {"json_schema_id": _framed(registered.json_id, b'{"store": "s"}'),
             "protobuf_id": _framed(registered.proto_id, registered.proto_sample[5:]),
             "wide_decimal": _framed(registered.avro_id, _wide_price())}[case]
    verdicts = check(process, registered.avro, [good, value, good])
    assert verdicts[0][0] == verdicts[2][0] == "row"
    assert verdicts[1][:2] == ("bad", "avro_invalid" if case == "wide_decimal" else "schema_type")
