"""What the native reader's tests share: the library must load (skipped with the reason where it is not built), and a
real Kafka whose topics take records of tens of MiB (the shapes the native reader must copy)."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from spouts.kafka import native as native_module
from tests.kafka.fixtures import RealKafkaPeer
from tests.peers import REAL_KAFKA, missing_peer

#: A topic's and a producer's largest record: room for a 50 MiB value with its key and headers.
LARGE_RECORD_BYTES = 64 * 1024 * 1024


@pytest.fixture(scope="module")
def native_built() -> None:
    """The native library loads here. Not built: skipped with why, except in CI, where the Makefile fails a failed
    build (its ``test -z "$CI"``), so there it fails. Built but not loading (a stale or broken build) always fails."""
    why = native_module.available()
    if why is not None:
        if not native_module.LIBRARY.exists() and not os.environ.get("CI"):
            pytest.skip(f"the native Kafka reader is not built here: {why}")
        pytest.fail(f"the native Kafka reader does not load{' (CI must build it)' if os.environ.get('CI') else ''}: "
                    f"{why}")


def require_real_kafka() -> RealKafkaPeer:
    """The real Kafka of KAFKA_BOOTSTRAP_SERVERS (the mock's records stay small): skipped without it, with the reason
    (a failure under REQUIRE_REAL_PEERS=1)."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        missing_peer(REAL_KAFKA, "records of tens of MiB need a real Kafka: KAFKA_BOOTSTRAP_SERVERS is not set")
    return RealKafkaPeer(bootstrap, int(os.environ.get("KAFKA_REPLICATION_FACTOR", "1")))


def create_large_record_topic(peer: RealKafkaPeer, name: str) -> None:
    """One partition whose records may be :data:`LARGE_RECORD_BYTES` (``max.message.bytes``; the broker's default
    is 1 MiB)."""
    admin = AdminClient({"bootstrap.servers": peer.bootstrap_servers()})
    rf = int(os.environ.get("KAFKA_REPLICATION_FACTOR", "1"))
    topic = NewTopic(name, 1, rf, config={"max.message.bytes": str(LARGE_RECORD_BYTES)})
    for f in admin.create_topics([topic], request_timeout=30).values():
        f.result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # creation is asynchronous: wait for the partition's leader
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and md.partitions and md.partitions[0].leader >= 0:
            return
        time.sleep(0.1)
    msg = f"topic {name} has no leader after 30s"
    raise TimeoutError(msg)


def large_record_producer_config(peer: RealKafkaPeer) -> dict[str, str | int]:
    """A producer that sends records up to :data:`LARGE_RECORD_BYTES` (its ``message.max.bytes``; default 1 MB)."""
    return {"bootstrap.servers": peer.bootstrap_servers(), "message.max.bytes": LARGE_RECORD_BYTES + 1024 * 1024,
            "enable.idempotence": True}
