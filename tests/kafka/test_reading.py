"""Reading planned ranges on any Kafka peer: exact records, the Arrow path, transactions' offset gaps."""

from __future__ import annotations

import pickle
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from spouts.errors import PartitionUnavailableError
from spouts.kafka import POOL, SCHEMA, KafkaSpout, read_arrow
from spouts.metadata import Partition, PartitionMetadata
from tests.kafka.fixtures import READ_COMMITTED, KafkaPeer, skip_mock_gap, unique_topic
from tests.kafka.helpers import config, produce, spread

T0 = 1_700_000_000_000


def _spout(peer: KafkaPeer, topic: str, **kw: object) -> KafkaSpout:
    return KafkaSpout(config(peer.bootstrap_servers(), topics=[topic], **kw), "topo")


def test_emit_returns_exactly_the_range_with_every_field(kafka_peer: KafkaPeer) -> None:
    """emit_partition yields the range's records only, with key, value, timestamp, headers and coordinates."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 2)
    headers = [("trace", b"abc"), ("empty", None)]
    acked = produce(kafka_peer.bootstrap_servers(), topic, spread(20, 2), key=b"k",
                    timestamps=[T0 + i for i in range(20)], headers=headers)
    records = _spout(kafka_peer, topic).emitter().emit_partition(PartitionMetadata(topic, 1, 3, 7, 4, "topo"))
    expected = [a for a in acked if a.partition == 1 and 3 <= a.offset < 7]
    assert [(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp) for r in records] == \
        [(a.topic, a.partition, a.offset, a.key, a.value, a.timestamp) for a in expected]
    assert all(r.headers == (("trace", b"abc"), ("empty", None)) for r in records)


def test_read_arrow_matches_emit_in_schema_and_rows(kafka_peer: KafkaPeer) -> None:
    """read_arrow yields the same rows as emit_partition, in the documented schema, split by batch_size."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(10, 1), timestamps=[T0 + i for i in range(10)],
            headers=[("h", b"1")])
    spout = _spout(kafka_peer, topic)
    meta = PartitionMetadata(topic, 0, 0, 10, 10, "topo")
    batches = list(spout.read_arrow(meta, batch_size=4))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    assert all(b.schema == SCHEMA for b in batches)
    table = pa.Table.from_batches(batches).to_pylist()
    emitted = spout.emitter().emit_partition(meta)
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in table] == \
        [(r.topic, r.partition, r.offset, r.key, r.value, [{"key": k, "value": v} for k, v in r.headers])
         for r in emitted]
    assert [int(r["timestamp"].timestamp() * 1000) for r in table] == [T0 + i for i in range(10)]


def test_read_arrow_without_headers_gives_empty_lists(kafka_peer: KafkaPeer) -> None:
    """Records without headers get an empty headers list, keys may be null."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(3, 1))
    spout = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic]), "topo")
    [batch] = read_arrow(spout.config, "topo", PartitionMetadata(topic, 0, 0, 3, 3, "topo"))
    assert batch.column("headers").to_pylist() == [[], [], []]
    assert batch.column("key").to_pylist() == [None, None, None]
    assert batch.column("value").to_pylist() == [b"v0", b"v1", b"v2"]


def test_reads_reuse_pooled_consumers_and_survive_pickling(kafka_peer: KafkaPeer) -> None:
    """Many reads through a pickled spout create one reading consumer per process, not one per read."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(30, 1))
    spout = pickle.loads(pickle.dumps(_spout(kafka_peer, topic)))
    POOL.close_all()
    before = POOL.created
    rows = [b.num_rows for i in range(0, 30, 3)
            for b in spout.read_arrow(PartitionMetadata(topic, 0, i, i + 3, 3, "topo"))]
    assert rows == [3] * 10
    assert POOL.created - before == 1


def test_empty_range_reads_nothing_without_touching_kafka() -> None:
    """An empty range yields no records and no batches, even with no cluster behind the address."""
    spout = KafkaSpout(config("127.0.0.1:1", topics=["nowhere"]), "topo")
    meta = PartitionMetadata("nowhere", 0, 5, 5, 0, "topo")
    assert spout.emitter().emit_partition(meta) == []
    assert list(spout.read_arrow(meta)) == []


@pytest.mark.timeout(120)
def test_range_past_the_log_end_times_out_as_unavailable(kafka_peer: KafkaPeer) -> None:
    """A range the log does not reach makes no progress and raises PartitionUnavailableError after read_timeout_s.

    Only the lower bound is timed (it waited out its timeout rather than giving up at once); a hang is the timeout's."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(5, 1))
    em = _spout(kafka_peer, topic, read_timeout_s=0.5).emitter()
    start = time.monotonic()
    with pytest.raises(PartitionUnavailableError, match="no progress at offset 5"):
        em.emit_partition(PartitionMetadata(topic, 0, 2, 9, 7, "topo"))
    assert time.monotonic() - start >= 0.5


def _transactions(bootstrap: str, topic: str, batches: list[tuple[list[bytes], bool]]) -> None:
    """Produce each list of values in one transaction on partition 0, committed or aborted."""
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx")})
    tx.init_transactions(30)
    for values, commit in batches:
        tx.begin_transaction()
        for v in values:
            tx.produce(topic, v, partition=0)
        tx.flush(30)
        (tx.commit_transaction if commit else tx.abort_transaction)(30)


def test_transaction_markers_leave_gaps_that_reading_steps_over(kafka_peer: KafkaPeer) -> None:
    """Committed transactions leave marker offsets: reads stop on position at the range end, even on a marker.

    Six records in three transactions occupy offsets 0-8 (markers at 2, 5, 8). Ranges that end on
    a marker read without waiting out their no-progress timeout (a read that did would raise
    PartitionUnavailableError), plans tile the log, every record is read exactly once, and with
    exact_record_counts a plan counts records, not offsets.
    """
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    _transactions(kafka_peer.bootstrap_servers(), topic, [([b"a", b"b"], True), ([b"c", b"d"], True),
                                                          ([b"e", b"f"], True)])
    em = _spout(kafka_peer, topic, exact_record_counts=True, read_timeout_s=5).emitter()
    p = Partition(topic, 0)
    last, got, metas = None, [], []
    while True:
        last = em.plan_partition(p, last, 3)
        assert last is not None
        if last.empty:
            break
        metas.append((last.first_offset, last.next_offset, last.record_count))
        got += [(r.offset, r.value) for r in em.emit_partition(last)]
    assert metas == [(0, 3, 2), (3, 6, 2), (6, 9, 2)]
    assert got == [(0, b"a"), (1, b"b"), (3, b"c"), (4, b"d"), (6, b"e"), (7, b"f")]
    only_marker = PartitionMetadata(topic, 0, 8, 9, 0, "topo")
    assert em.emit_partition(only_marker) == []
    assert list(em.read_arrow(only_marker)) == []


def test_aborted_records_are_never_read_and_open_transactions_never_planned(kafka_peer: KafkaPeer) -> None:
    """read_committed: aborted records are skipped in reads, and a plan stops at the LSO of an open transaction."""
    if not READ_COMMITTED[kafka_peer.kind]:
        skip_mock_gap("librdkafka's mock has no read_committed semantics (Fetch: LastStableOffset = high "
                    "watermark, no aborted-transaction list); checked by test_mock_gaps_still_hold")
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    bootstrap = kafka_peer.bootstrap_servers()
    _transactions(bootstrap, topic, [([b"ok1", b"ok2"], True), ([b"bad1", b"bad2"], False), ([b"ok3"], True)])
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("open")})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, b"open", partition=0)
    tx.flush(30)
    try:
        em = _spout(kafka_peer, topic, exact_record_counts=True).emitter()
        meta = em.plan_partition(Partition(topic, 0), None, 1000)
        assert meta is not None
        assert (meta.first_offset, meta.next_offset, meta.record_count) == (0, 8, 3)
        assert [r.value for r in em.emit_partition(meta)] == [b"ok1", b"ok2", b"ok3"]
        assert pa.Table.from_batches(list(em.read_arrow(meta))).column("value").to_pylist() == [b"ok1", b"ok2", b"ok3"]
    finally:
        tx.abort_transaction(30)
