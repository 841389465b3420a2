"""Refused credentials, ACLs and certificates reach the failure classes typed, from every librdkafka client.

librdkafka tells a wrong password or an untrusted certificate only to the error callback; the request
itself fails like an outage (``_TRANSPORT``). The fakes here behave that way: a request fails with
``_TRANSPORT`` and ``poll`` serves the refusal to ``error_cb``. (The real servers: tests/service/test_secured.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from app.commands.topics.cluster import KafkaTopicCluster
from app.failures.policy import BAD_INPUT, Failure, FailurePolicy
from app.kafka_offsets import KafkaOffsets
from spouts.errors import AccessRefusedError, SourceUnavailableError
from spouts.kafka import access, consumers, discovery
from spouts.kafka.access import AccessWatch, refused
from spouts.kafka.config import KafkaSpoutConfig
from spouts.metadata import Partition

SASL = KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://b:9093/bootstrap: SASL authentication error: "
                  "Authentication failed: Invalid username or password (after 303ms in state AUTH_REQ)")
TLS = KafkaError(KafkaError._SSL, "sasl_ssl://b:9093/bootstrap: SSL handshake failed: certificate verify failed")
TRANSPORT = KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")
PROPS = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "trident",
         "sasl.password": "s3cret-pw"}


def spout_config() -> KafkaSpoutConfig:
    return KafkaSpoutConfig("b:9093", topics=("words",), properties=PROPS, request_timeout_s=0.1)


class RefusingClient:
    """A librdkafka client of a cluster that refuses it: requests fail as an outage would, ``poll`` tells why."""

    def __init__(self, conf: dict[str, Any], told: KafkaError | None = SASL) -> None:
        self.conf, self.told = conf, told
        self.error_cb: Callable[[KafkaError], None] | None = conf.get("error_cb")

    def poll(self, timeout: float = 0) -> None:
        if self.told is not None and self.error_cb is not None:
            self.error_cb(self.told)

    def list_topics(self, *a: Any, **k: Any) -> Any:
        raise KafkaException(TRANSPORT)

    def get_watermark_offsets(self, *a: Any, **k: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out"))

    def close(self) -> None:
        pass


def test_a_refusal_told_to_the_error_callback_is_typed_and_names_server_principal_and_setting() -> None:
    watch = AccessWatch({"bootstrap.servers": "b:9093", **PROPS})
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert watch.refusal is None
    watch(SASL)
    e = watch.refusal
    assert e is not None
    assert e.kind == "authentication"
    line = str(e)
    assert line.startswith("authentication refused by Kafka at b:9093 for principal User:trident: ")
    assert "Invalid username or password" in line
    assert "check sasl.username, sasl.password" in line
    assert "s3cret-pw" not in line
    assert "\n" not in line
    watch(TLS)
    assert watch.refusal is not None
    assert watch.refusal.kind == "TLS"
    assert "ssl.ca.location" in str(watch.refusal)


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                                  KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  KafkaError.CLUSTER_AUTHORIZATION_FAILED])
def test_a_missing_acl_is_an_authorization_refusal_naming_the_object(code: int) -> None:
    e = refused(KafkaError(code), {"bootstrap.servers": "b:9093", **PROPS}, "dead-letter topic dl")
    assert e is not None
    assert e.kind == "authorization"
    assert str(e).startswith("authorization refused by Kafka at b:9093 for principal User:trident: dead-letter topic dl")
    assert "the ACLs of User:trident on dead-letter topic dl" in str(e)
    assert refused(TRANSPORT, PROPS) is None


def test_discovery_raises_the_refusal_not_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery, "Consumer", RefusingClient)
    coordinator = discovery.KafkaCoordinator(spout_config(), "topo")
    with pytest.raises(AccessRefusedError) as raised:
        coordinator.refresh()
    assert raised.value.kind == "authentication"
    assert raised.value.servers == "b:9093"
    decision = FailurePolicy().decide(Failure(raised.value, txid=1, attempt=1))
    assert decision.permanent
    assert decision.exit_code == BAD_INPUT
    assert decision.cause == "authentication"
    assert decision.reason == str(raised.value)


def test_discovery_of_an_unreachable_cluster_stays_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery, "Consumer", lambda conf: RefusingClient(conf, told=None))
    with pytest.raises(SourceUnavailableError):
        discovery.KafkaCoordinator(spout_config(), "topo").refresh()


def test_a_refusal_while_publishing_offsets_stops_the_next_discovery() -> None:
    coordinator = discovery.KafkaCoordinator(spout_config(), "topo")
    publisher = coordinator._publisher
    publisher._refused = refused(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), publisher._conf, "group trident-topo")
    with pytest.raises(AccessRefusedError, match=r"authorization refused .* group trident-topo"):
        coordinator.partitions()


def test_a_pooled_reader_that_was_refused_raises_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "Consumer", lambda conf: RefusingClient(conf, told=TLS))
    pool = consumers.ConsumerPool(consumers.open_consumer)
    with pytest.raises(AccessRefusedError, match="TLS refused by Kafka at b:9093") as raised:  # noqa: PT012, SIM117  the block is the step under test; the nesting shows which context raises
        with pool.lease(spout_config().consumer_config("topo")) as consumer:
            try:
                consumer.get_watermark_offsets(None)  # type: ignore[arg-type]  # a wrong argument on purpose
            except KafkaException as e:
                raise SourceUnavailableError("b:9093", "watermarks timed out") from e
    assert isinstance(raised.value.__cause__, SourceUnavailableError)
    assert not pool._watches
    with pool.lease(spout_config().consumer_config("topo")) as again:
        assert again is not consumer  # the refused consumer was not returned to the pool


def test_a_read_refused_by_an_acl_raises_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "Consumer", lambda conf: RefusingClient(conf, told=None))
    pool = consumers.ConsumerPool(consumers.open_consumer)
    with pytest.raises(AccessRefusedError, match=r"authorization refused .*topic words"):  # noqa: SIM117  the nesting shows which context raises
        with pool.lease(spout_config().consumer_config("topo")):
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "topic words: not authorized"))


def test_the_admin_and_ops_clients_raise_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    from app import kafka_offsets as offsets
    from app.commands.topics import cluster

    monkeypatch.setattr(cluster, "AdminClient", RefusingClient)
    with pytest.raises(AccessRefusedError, match="principal User:trident"):
        KafkaTopicCluster("b:9093", PROPS, timeout_s=0.1).describe(["words"])
    monkeypatch.setattr(offsets, "Consumer", lambda conf: RefusingClient(conf, told=TLS))
    with KafkaOffsets(spout_config(), "topo") as ops, pytest.raises(AccessRefusedError, match="TLS refused"):
        ops.watermarks([Partition("words", 0)])


def test_every_client_config_gets_the_watch_and_the_rate_limited_logger() -> None:
    conf, watch = access.watched({"bootstrap.servers": "b:9093", **PROPS})
    assert conf["error_cb"] is watch
    assert conf["logger"] is access.LIBRDKAFKA_LOG
    assert "sasl.password" not in watch.conf  # the watch keeps only what it names


class HidingClient(RefusingClient):
    """A cluster where the principal has no Describe ACL on ``words``: a full listing leaves it out, a
    request by name says why."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        class Topic:
            def __init__(self, error: KafkaError | None) -> None:
                self.error, self.partitions = error, {0: None}

        class Metadata:
            def __init__(self, topics: dict[str, Topic]) -> None:
                self.topics = topics

        if topic is None:
            return Metadata({"other": Topic(None)})
        return Metadata({topic: Topic(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))})


def test_a_listed_topic_hidden_by_a_missing_acl_is_an_authorization_refusal_not_a_missing_topic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discovery, "Consumer", lambda conf: HidingClient(conf, told=None))
    with pytest.raises(AccessRefusedError, match=r"authorization refused .* for principal User:trident: topic words"):
        discovery.KafkaCoordinator(spout_config(), "topo").refresh()


def test_scram_refusal_names_the_mechanism_to_check() -> None:
    """SCRAM-SHA-512 (no test broker here has SCRAM credentials: Kafka 3.3 in KRaft mode cannot store them):
    the config validates, and a broker's refusal names the mechanism with the settings to check."""
    from app.config import loads

    cfg = loads("kafka: {bootstrap_servers: 'b:9093', properties: {security.protocol: SASL_SSL, "
                "sasl.mechanism: SCRAM-SHA-512, sasl.username: trident}}\n"
                "pipelines: [{id: p, spout: {topics: [t]}, group_by: [], aggregates: [{count: {as: n}}], "
                "state: {backend: sqlite, sqlite_path: /tmp/x.db, table: t}}]\n",
                env={"TRIDENT_KAFKA_SASL_PASSWORD": "scram-s3cret"})
    props = dict(cfg.kafka.properties)
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    e = refused(KafkaError(KafkaError._AUTHENTICATION, "SASL SCRAM-SHA-512 mechanism handshake failed: Broker: "
                           "Request not valid given the current SASL state"), {"bootstrap.servers": "b:9093", **props})
    assert e is not None
    assert e.kind == "authentication"
    assert "check sasl.username, sasl.password and sasl.mechanism (SCRAM-SHA-512)" in str(e)
    assert "scram-s3cret" not in str(e)


def test_a_refusal_seen_before_a_success_is_no_verdict_on_a_later_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TLS error told once (a handshake cut short while a broker restarted), then a good listing: a later
    outage stays an outage."""

    class Flaky(RefusingClient):
        answers: ClassVar[list[str]] = ["fail", "ok", "fail"]  # one client per call: the script is shared

        def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
            if self.answers.pop(0) == "fail":
                raise KafkaException(TRANSPORT)
            return type("M", (), {"topics": {"words": type("T", (), {"error": None, "partitions": {0: None}})()}})()

    monkeypatch.setattr(discovery, "Consumer", lambda conf: Flaky(conf, told=None))
    coordinator = discovery.KafkaCoordinator(spout_config(), "topo")
    with pytest.raises(SourceUnavailableError):
        coordinator.refresh()  # nothing told yet: an outage
    assert coordinator._watch is not None
    coordinator._watch(TLS)  # told while no request was failing
    assert coordinator.refresh() == [Partition("words", 0)]  # a success forgets it
    assert coordinator.refresh() == [Partition("words", 0)]  # the next failure: the known partitions, no refusal


class RefusedOnceClient(RefusingClient):
    """A client told of a refusal once (a handshake cut short while a broker restarted), then never again."""

    def poll(self, timeout: float = 0) -> None:
        super().poll(timeout)
        self.told = None


def test_a_pooled_reader_forgets_a_refusal_once_a_read_went_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal told before a successful read is no verdict on a later outage: the outage stays transient."""
    monkeypatch.setattr(consumers, "Consumer", lambda conf: RefusedOnceClient(conf, told=SASL))
    pool = consumers.ConsumerPool(consumers.open_consumer)
    conf = spout_config().consumer_config("topo")
    with pool.lease(conf) as first:
        first.poll(0)  # the refusal reaches the error callback; the read itself then goes through
    with pytest.raises(KafkaException) as raised, pool.lease(conf) as second:  # noqa: PT012  the block is the step under test
        assert second is first  # the same pooled client, told nothing since
        raise KafkaException(TRANSPORT)
    assert not isinstance(raised.value, AccessRefusedError)
