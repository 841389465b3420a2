"""The Kafka side of ``topics``: describe, create, grow and reconfigure topics with confluent-kafka's AdminClient.

Partitions and replication factor come from metadata (every cluster answers); configs from
DescribeConfigs, which some clusters do not answer (librdkafka's mock cluster has no controller,
so every admin request times out there): the topic's ``config_error`` then says why. Configs are
changed with IncrementalAlterConfigs (SET of the declared keys only; nothing else is touched).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from app.commands.topics.plan import TopicState
from app.config.topics import TopicSettings
from app.kafka_offsets import kafka_reason
from spouts.kafka.access import refused, watched


class TopicCluster(Protocol):
    """What ``topics plan|apply`` needs from a cluster."""

    def describe(self, names: Sequence[str]) -> dict[str, TopicState]: ...

    def create(self, topic: TopicSettings) -> None: ...

    def add_partitions(self, name: str, total: int) -> None: ...

    def set_configs(self, name: str, configs: Mapping[str, str]) -> None: ...


class KafkaTopicCluster:
    """A :class:`TopicCluster` over the AdminClient; every request bounded by ``timeout_s``."""

    def __init__(self, bootstrap_servers: str, properties: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        conf, self._watch = watched({**dict(properties or {}), "bootstrap.servers": bootstrap_servers})
        self._admin = AdminClient(conf)

    def describe(self, names: Sequence[str]) -> dict[str, TopicState]:
        try:  # all topics: asking for one by name may auto-create it on some brokers
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            self._watch.check(self._admin)  # a refused credential or certificate, told only to the error callback
            msg = f"cannot list the cluster's topics: {e.args[0].str()}"
            raise ConnectionError(msg) from None
        present = [n for n in names if n in md.topics and md.topics[n].error is None]
        configs, errors = self._configs(present)
        out = {}
        for n in present:
            parts = md.topics[n].partitions
            rf = max((len(p.replicas) for p in parts.values()), default=0)
            out[n] = TopicState(n, len(parts), rf, configs.get(n), errors.get(n))
        return out

    def _configs(self, names: Sequence[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        if not names:
            return {}, {}
        found, errors = {}, {}
        try:
            futures = self._admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                                   request_timeout=self.timeout_s)
        except KafkaException as e:
            return {}, {n: kafka_reason(e) for n in names}
        for resource, f in futures.items():
            try:
                found[resource.name] = {k: v.value for k, v in f.result(self.timeout_s + 5).items()}
            except Exception as e:  # noqa: BLE001 - per topic: a KafkaException or a timeout; reported, not raised
                errors[resource.name] = kafka_reason(e)
        return found, errors

    def create(self, topic: TopicSettings) -> None:
        new = NewTopic(topic.name, topic.partitions,
                       topic.replication_factor if topic.replication_factor is not None else -1,
                       config=dict(topic.configs))
        self._wait(self._admin.create_topics([new], request_timeout=self.timeout_s), f"create topic {topic.name}")

    def add_partitions(self, name: str, total: int) -> None:
        self._wait(self._admin.create_partitions([NewPartitions(name, total)], request_timeout=self.timeout_s),
                   f"add partitions to {name}")

    def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        self._wait(self._admin.incremental_alter_configs([resource], request_timeout=self.timeout_s),
                   f"set configs of {name}")

    def _wait(self, futures: Mapping[Any, Any], what: str) -> None:
        for f in futures.values():
            try:
                f.result(self.timeout_s + 5)
            except Exception as e:  # noqa: BLE001 - re-raised with the object named
                found = refused(e.args[0] if isinstance(e, KafkaException) and e.args else None,
                                self._watch.conf, what)
                if found is not None:  # e.g. no Create ACL: the principal and the ACL to check
                    raise found from None
                msg = f"{what}: {kafka_reason(e)}"
                raise RuntimeError(msg) from None

