"""The native reader against confluent-kafka's over the shapes of records a real broker hands out: keys and values of
0 bytes, null, 1 MiB and 50 MiB, headers, compressed batches (gzip, lz4, zstd, snappy), control records, committed
and aborted transactions, and an open one that a ``read_committed`` range stops before.

Both readers must read exactly the records the producers wrote and did not abort (the truth, kept here as they are
produced), the native one without headers (it does not build them), confluent-kafka's with them. ``make
test-native-sanitized`` runs this under AddressSanitizer and UndefinedBehaviorSanitizer with more examples
(``NATIVE_SHAPES_EXAMPLES``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spouts.kafka import read_arrow
from spouts.kafka.arrow import schema_of
from spouts.metadata import PartitionMetadata
from tests.kafka.fixtures import RealKafkaPeer, unique_topic
from tests.kafka.helpers import config
from tests.kafka.native_fixtures import (
    create_large_record_topic,
    large_record_producer_config,
    native_built,  # noqa: F401  (fixture)
    require_real_kafka,
)

pytestmark = [pytest.mark.usefixtures("native_built"), pytest.mark.real_kafka]
MiB = 1024 * 1024
SIZES = (None, 0, 7, MiB)  # None: a null key or value
#: At most one 50 MiB key or value an example (its first record's): a topic's record holds up to 64 MiB.
LARGE = 50 * MiB
COMPRESSIONS = ("none", "gzip", "lz4", "zstd", "snappy")
#: How a segment of records is produced: plainly (idempotent), in a committed or an aborted transaction.
MODES = ("plain", "committed", "aborted")
Headers = list[tuple[str, str | bytes | None]] | None
Truth = list[tuple[bytes | None, bytes | None, Headers]]


@dataclass(frozen=True)
class Shape:
    key: int | None
    value: int | None
    headers: Headers


@dataclass(frozen=True)
class Segment:
    mode: str
    compression: str
    records: tuple[Shape, ...]


def _payload(size: int | None, n: int, what: bytes) -> bytes | None:
    """``size`` bytes that tell records and fields apart (``n``: the record's number)."""
    if size is None:
        return None
    stamp = what + n.to_bytes(4, "big")
    return (stamp * (size // len(stamp) + 1))[:size]


shapes = st.builds(Shape, st.sampled_from(SIZES), st.sampled_from(SIZES),
                   st.sampled_from([None, [("h", b"1")], [("a", None), ("b", b"")], [("x", b"y" * 300)] * 3]))
segments = st.builds(Segment, st.sampled_from(MODES), st.sampled_from(COMPRESSIONS),
                     st.lists(shapes, min_size=1, max_size=5).map(tuple))


def _with_large(segs: list[Segment], large: str | None) -> list[Segment]:
    """``segs`` with the first record's key or value (``large``) of :data:`LARGE` bytes."""
    if large is None:
        return segs
    first, *rest = segs
    shape = replace(first.records[0], key=LARGE) if large == "key" else replace(first.records[0], value=LARGE)
    return [replace(first, records=(shape, *first.records[1:])), *rest]


def _produce(peer: RealKafkaPeer, topic: str, segs: list[Segment],
             open_tx: tuple[Shape, ...]) -> tuple[Truth, Producer | None]:
    """Produce ``segs`` in order, then ``open_tx`` in a transaction left open and a plain record after it; returns
    the records a ``read_committed`` reader must see (key, value, headers) and the open transaction's producer."""
    truth: Truth = []
    n = 0
    for seg in segs:
        conf = {**large_record_producer_config(peer), "compression.type": seg.compression, "linger.ms": 20}
        if seg.mode != "plain":
            conf["transactional.id"] = unique_topic("tx")
        p = Producer(conf)
        if seg.mode != "plain":
            p.init_transactions(30)
            p.begin_transaction()
        for s in seg.records:
            key, value = _payload(s.key, n, b"K"), _payload(s.value, n, b"V")
            p.produce(topic, value, key=key, partition=0, headers=s.headers)
            if seg.mode != "aborted":
                truth.append((key, value, s.headers))
            n += 1
        if seg.mode == "plain":
            assert p.flush(120) == 0
        else:
            p.flush(120)
            (p.commit_transaction if seg.mode == "committed" else p.abort_transaction)(120)
    opened: Producer | None = None
    if open_tx:
        opened = Producer({**large_record_producer_config(peer), "transactional.id": unique_topic("open")})
        opened.init_transactions(30)
        opened.begin_transaction()
        for s in open_tx:
            opened.produce(topic, _payload(s.value, n, b"O"), key=_payload(s.key, n, b"O"), partition=0)
            n += 1
        opened.flush(60)
        after = Producer(large_record_producer_config(peer))
        after.produce(topic, b"after the open transaction", partition=0)  # past the last stable offset: unread
        assert after.flush(60) == 0
    return truth, opened


def _stable_end(peer: RealKafkaPeer, topic: str) -> int:
    """The range a ``read_committed`` plan reads: up to the last stable offset (the open transaction's first)."""
    c = Consumer({"bootstrap.servers": peer.bootstrap_servers(), "group.id": "shapes",
                  "isolation.level": "read_committed"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)[1])
    finally:
        c.close()


@settings(max_examples=int(os.environ.get("NATIVE_SHAPES_EXAMPLES", "5")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(segs=st.lists(segments, min_size=1, max_size=4), large=st.sampled_from([None, None, "key", "value"]),
       open_tx=st.lists(shapes, max_size=2).map(tuple), batch_size=st.integers(1, 10))
@example(segs=[Segment("committed", "zstd", (Shape(MiB, 0, [("h", b"1")]), Shape(None, 0, None))),
               Segment("aborted", "gzip", (Shape(0, MiB, None),)), Segment("plain", "snappy", (Shape(7, None, None),))],
         large="value", open_tx=(Shape(7, 7, None),), batch_size=3)
@example(segs=[Segment("plain", "lz4", (Shape(0, None, [("a", None), ("b", b"")]), Shape(None, None, None))),
               Segment("committed", "none", (Shape(0, 0, None),) * 3)], large="key", open_tx=(), batch_size=1)
@example(segs=[Segment("aborted", "none", (Shape(None, None, None),))], large=None, open_tx=(), batch_size=1)
@pytest.mark.timeout(1800)
def test_both_readers_read_every_shape_of_record_as_produced(segs: list[Segment], large: str | None,
                                                            open_tx: tuple[Shape, ...], batch_size: int) -> None:
    peer = require_real_kafka()
    segs = _with_large(segs, large)
    topic = unique_topic("shapes")
    create_large_record_topic(peer, topic)
    opened: Producer | None = None
    try:
        truth, opened = _produce(peer, topic, segs, open_tx)
        end = _stable_end(peer, topic)
        base = config(peer.bootstrap_servers(), topics=[topic], read_timeout_s=60.0,
                      properties={"fetch.max.bytes": str(60 * MiB), "max.partition.fetch.bytes": str(60 * MiB)})
        meta = PartitionMetadata(topic, 0, 0, end, end, "topo")
        python = pa.Table.from_batches(list(read_arrow(replace(base, reader="python"), "topo", meta, batch_size,
                                                       ["offset", "key", "value", "headers"])),
                                       schema=schema_of(["offset", "key", "value", "headers"]))
        native_batches = list(read_arrow(replace(base, reader="native"), "topo", meta, batch_size,
                                         ["offset", "key", "value"]))
        assert all(0 < b.num_rows <= batch_size for b in native_batches)
        native = pa.Table.from_batches(native_batches, schema=python.select(["offset", "key", "value"]).schema)
        assert native.equals(python.select(["offset", "key", "value"]))
        rows = python.to_pylist()
        assert [(r["key"], r["value"]) for r in rows] == [(k, v) for k, v, _ in truth]
        assert [[(h["key"], h["value"]) for h in r["headers"]] if r["headers"] else None for r in rows] \
            == [h or None for _, _, h in truth]
    finally:
        if opened is not None:
            opened.abort_transaction(60)
        peer.delete_topic(topic)  # up to 50 MiB of the broker's disk an example
