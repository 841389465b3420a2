"""Settings: validation, secrets never printed, librdkafka pass-through, picklable spouts, the fork-safe pool."""

from __future__ import annotations

import logging
import os
import pickle

import pytest

from spouts.kafka import (
    SCHEMA,
    ConsumerPool,
    FirstPoll,
    KafkaSpout,
    KafkaSpoutConfig,
    TransactionalKafkaSpout,
)
from spouts.kafka.consumers import open_consumer
from spouts.protocols import (
    ArrowSpout,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedSpout,
    SpoutKind,
)

SECRETS = {"sasl.password": "hunter2", "ssl.key.password": "k3y-pass", "sasl.oauthbearer.client.secret": "s3cr3t",
           "sasl.username": "alice", "security.protocol": "SASL_SSL", "socket.timeout.ms": "1234"}


def _cfg(**kw: object) -> KafkaSpoutConfig:
    return KafkaSpoutConfig("b1:9092,b2:9092", topics=("events",), properties=SECRETS, **kw)  # type: ignore[arg-type]


def test_secrets_never_appear_in_reprs() -> None:
    """Config, spout, emitter and coordinator reprs redact password/secret properties and keep the rest."""
    spout = KafkaSpout(_cfg(), "topo")
    for text in (repr(spout.config), repr(spout), repr(spout.emitter()), str(spout)):
        assert "hunter2" not in text
        assert "k3y-pass" not in text
        assert "s3cr3t" not in text
        assert "alice" in text
        assert "***" in text


def test_properties_pass_through_but_cannot_override_correctness_settings() -> None:
    """Every librdkafka property reaches the consumer config; reserved ones are refused with a clear message."""
    conf = _cfg().consumer_config("topo")
    assert {k: conf[k] for k in SECRETS} == SECRETS
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.auto.commit"] == "false"
    assert conf["auto.offset.reset"] == "error"
    assert conf["group.id"] == "trident-topo"
    with pytest.raises(ValueError, match=r"auto.offset.reset"):
        KafkaSpoutConfig("b:9092", topics=("t",), properties={"auto.offset.reset": "earliest"})


@pytest.mark.parametrize(("range_records", "queued"), [(0, 1024), (2_000, 1024), (6_250, 1024), (50_000, 8192),
                                                        (400_000, 65_536), (10_000_000, 100_000)])
def test_a_reading_consumer_prefetches_a_quarter_of_its_range(range_records: int, queued: int) -> None:
    """The prefetch queue follows the range (a power of two between 1,024 and librdkafka's 100,000), with
    small fetches and a short queue backoff; other roles and user properties keep their own settings."""
    conf = KafkaSpoutConfig("b:9092", topics=("t",)).consumer_config("topo", range_records=range_records)
    assert conf["queued.min.messages"] == str(queued)
    assert queued <= max(1024, range_records // 4)
    assert conf["max.partition.fetch.bytes"] == "262144"
    assert conf["fetch.queue.backoff.ms"] == "5"
    assert "queued.min.messages" not in KafkaSpoutConfig("b:9092", topics=("t",)).consumer_config("topo", role="plan")
    mine = KafkaSpoutConfig("b:9092", topics=("t",), properties={"queued.min.messages": "50000"})
    assert mine.consumer_config("topo", range_records=range_records)["queued.min.messages"] == "50000"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"topics": ()}, "exactly one"),
    ({"topics": ("a",), "topic_pattern": "a.*"}, "exactly one"),
    ({"topics": ("a",), "first_poll": FirstPoll.TIMESTAMP}, "first_poll_timestamp_ms"),
    ({"topics": ("a",), "isolation_level": "dirty"}, "isolation_level"),
    ({"topic_pattern": "(unclosed"}, "not a regular expression"),
])
def test_invalid_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    """Settings that can't work fail at construction, saying what to change."""
    with pytest.raises(ValueError, match=message):
        KafkaSpoutConfig("b:9092", **kwargs)  # type: ignore[arg-type]


def test_config_is_hashable_and_equal_by_value() -> None:
    """Two configs with the same settings are equal and hash alike (properties included)."""
    assert _cfg() == _cfg()
    assert hash(_cfg()) == hash(_cfg())
    other = KafkaSpoutConfig("b1:9092,b2:9092", topics=("events",), properties={**SECRETS, "sasl.password": "x"})
    assert other != _cfg()


def test_first_poll_flags() -> None:
    """UNCOMMITTED_* resume stored metadata; the position names where a first poll starts."""
    assert [s.uncommitted for s in FirstPoll] == [False, False, False, True, True, True]
    assert [s.position for s in FirstPoll] == ["earliest", "latest", "timestamp"] * 2


def test_spouts_implement_the_protocols_and_pickle_without_clients() -> None:
    """Both spouts satisfy the protocols, and spout, emitter and a used coordinator round-trip through pickle."""
    for cls, kind in ((KafkaSpout, SpoutKind.OPAQUE), (TransactionalKafkaSpout, SpoutKind.TRANSACTIONAL)):
        spout = cls(_cfg(), "topo")
        assert spout.kind is kind
        assert isinstance(spout, PartitionedSpout)
        assert isinstance(spout.emitter(), PartitionedEmitter)
        coord = spout.coordinator()
        assert isinstance(coord, PartitionedCoordinator)
        clone = pickle.loads(pickle.dumps(spout))
        assert type(clone) is cls
        assert clone.config == spout.config
        assert clone.topology_id == "topo"
        em = pickle.loads(pickle.dumps(spout.emitter()))
        assert em.kind is kind
        assert em.config == spout.config
        assert pickle.loads(pickle.dumps(coord)).config == spout.config
        coord.close()


def test_secrets_never_reach_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """Logging a spout at any level shows no secret (its repr is the only text it offers)."""
    spout = KafkaSpout(_cfg(), "topo")
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("starting %s with %r", spout, spout.config)
    assert "hunter2" not in caplog.text
    assert "starting KafkaSpout" in caplog.text


def test_pool_starts_empty_after_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool used from a new pid (a forked Spark worker) drops inherited consumers instead of reusing them."""
    pool = ConsumerPool(open_consumer)
    conf = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
    with pool.lease(conf) as parent_consumer:
        pass
    assert pool.created == 1
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)
    with pool.lease(conf) as child_consumer:
        assert child_consumer is not parent_consumer
    with pool.lease(conf) as again:
        assert again is child_consumer
    assert pool.created == 1  # counted afresh in the child
    monkeypatch.undo()
    parent_consumer.close()
    child_consumer.close()


def test_pool_reuses_idle_consumers_and_closes_a_failed_one() -> None:
    """A returned consumer is leased again; one whose lease raised is closed, not returned."""
    pool = ConsumerPool(open_consumer)
    conf = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
    with pool.lease(conf) as first:
        pass
    with pool.lease(conf) as again:
        assert again is first
    with pytest.raises(RuntimeError), pool.lease(conf):
        raise RuntimeError("read failed")
    with pool.lease(conf) as fresh:
        assert fresh is not first
    pool.close_all()
    with pool.lease(conf) as after_close:
        assert after_close is not fresh
    assert pool.created == 3
    pool.close_all()


def test_kafka_spouts_are_arrow_spouts() -> None:
    """Both Kafka spouts declare what Spark needs: read_arrow and the schema of its batches."""
    for cls in (KafkaSpout, TransactionalKafkaSpout):
        spout = cls(KafkaSpoutConfig("localhost:9092", topics=("t",)), "topo")
        assert isinstance(spout, ArrowSpout)
        assert spout.arrow_schema == SCHEMA
