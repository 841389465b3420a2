"""The native reader's memory between reads: one large record must not stay resident in a pooled reader.

Its buffers grow to the largest chunk they copied; a read that needed much less gives the surplus back, and so does
the end of a range (the pool keeps idle readers per configuration, each would otherwise hold its largest record).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from spouts.kafka.arrow import schema_of
from spouts.kafka.native import NativeReader
from spouts.kafka.native.batches import read_native
from spouts.metadata import PartitionMetadata
from tests.kafka.fixtures import unique_topic
from tests.kafka.helpers import config
from tests.kafka.native_fixtures import (
    create_large_record_topic,
    large_record_producer_config,
    native_built,  # noqa: F401  (fixture)
    require_real_kafka,
)

pytestmark = [pytest.mark.usefixtures("native_built"), pytest.mark.real_kafka]
LARGE = 50 * 1024 * 1024
LARGE_KEY = 8 * 1024 * 1024
#: What a reader may hold once it has given a large record back: 1 MiB kept per byte buffer, plus record arrays.
SMALL_HOLD = 4 * 1024 * 1024


@pytest.mark.timeout(180)
def test_a_large_record_is_given_back_after_smaller_reads_and_after_the_range() -> None:
    peer = require_real_kafka()
    topic = unique_topic("large")
    create_large_record_topic(peer, topic)
    p = Producer(large_record_producer_config(peer))
    p.produce(topic, b"v" * LARGE, key=b"k" * LARGE_KEY, partition=0)  # offset 0
    for i in range(20):
        p.produce(topic, f"small {i}".encode(), key=b"k", partition=0)  # offsets 1..20
    assert p.flush(60) == 0
    cfg = config(peer.bootstrap_servers(), topics=[topic], read_timeout_s=30.0)
    reader, _ = NativeReader.open(cfg.consumer_config("topo"))
    try:
        fresh = reader.held_bytes
        reader.assign(topic, 0, 0)
        chunk = reader.read(0, 21, 100, 30.0, keys=True, max_bytes=1024)  # past its first record: one a chunk
        assert (chunk.count, chunk.pos) == (1, 1)
        assert reader.held_bytes >= LARGE + LARGE_KEY
        pos = 1
        while pos < 21:
            chunk = reader.read(pos, 21, 100, 30.0, keys=True)
            assert chunk.count > 0, "no record within 30 s"
            pos = chunk.pos
        assert reader.held_bytes <= SMALL_HOLD, (fresh, reader.held_bytes)

        # a range that ends on the large record: the unassign at its end gives it back (the pool's idle reader)
        meta = PartitionMetadata(topic, 0, 0, 1, 1, "topo")
        batches = list(read_native(reader, meta, schema_of(["offset", "key", "value"]), batch_size=10,
                                   read_timeout_s=30.0))
        assert [len(b.column("value")[0].as_py()) for b in batches] == [LARGE]
        assert reader.held_bytes <= SMALL_HOLD, (fresh, reader.held_bytes)
    finally:
        reader.close()
        peer.delete_topic(topic)  # 58 MiB of the shared broker's disk
