"""Kafka's topic ids, asked on the driver while planning: what tells a re-created topic from the old one.

A topic's id (a UUID, KIP-516) is new each time the topic is created, so a position stored with the
id of its log is never applied to another log, whatever the offsets. Ids come from the admin API's
DescribeTopics (one request for all the topics of a plan, sent beside the plan's watermark queries).

Ids are *unknown* (the emitter then tells logs apart by offsets alone, as before ids were kept) when
the cluster cannot answer: a cluster whose metadata names no live controller (librdkafka's mock
cluster, unless a test sets one), a broker that knows no ids (before Kafka 2.8: the zero id), a
request that fails or times out. Whether the cluster has a controller is checked at most once per
``discovery_interval_s``, so a cluster that cannot answer never makes a plan wait for a timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from spouts.kafka.access import watched
from spouts.kafka.config import KafkaSpoutConfig

log = logging.getLogger(__name__)

#: librdkafka settings of the spout's consumers that an admin client has no use for (it would warn about each).
CONSUMER_ONLY = frozenset({"group.id", "isolation.level", "enable.auto.commit", "enable.auto.offset.store",
                           "enable.partition.eof", "auto.offset.reset", "fetch.wait.max.ms"})


class PendingIds:
    """The answer to one DescribeTopics request, collected when the plan needs it."""

    def __init__(self, futures: Mapping[str, Future[Any]], timeout_s: float) -> None:
        self._futures, self._timeout_s = futures, timeout_s

    def result(self) -> dict[str, str]:
        """Topic -> id, for the topics the cluster answered with a real (non-zero) id."""
        found: dict[str, str] = {}
        for topic, future in self._futures.items():
            try:
                uuid = future.result(self._timeout_s + 1).topic_id
            except Exception as e:  # noqa: BLE001 - a topic not answered (its own error, a timeout): its id is unknown
                log.debug("topic id of %s unknown: %s", topic, e)
                continue
            if uuid is not None and (uuid.get_most_significant_bits() or uuid.get_least_significant_bits()):
                found[topic] = str(uuid)
        return found


NO_IDS = PendingIds({}, 0.0)


class TopicIds:
    """Asks a cluster for topic ids (driver only: holds an admin client, opened on first use, never pickled)."""

    def __init__(self, config: KafkaSpoutConfig, topology_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.topology_id, self._clock = config, topology_id, clock
        self._admin: AdminClient | None = None
        self._answers: bool = False
        self._checked_at = float("-inf")
        self.requests = 0  # DescribeTopics requests sent (the planner's cost: one per plan)

    def ask(self, topics: Sequence[str]) -> PendingIds:
        """Send one DescribeTopics request for ``topics`` (without waiting); NO_IDS when the cluster cannot answer."""
        wanted = sorted(set(topics))
        if not wanted or not self._cluster_answers():
            return NO_IDS
        admin = self._client()
        try:
            futures = admin.describe_topics(TopicCollection(wanted), request_timeout=self.config.request_timeout_s)
        except KafkaException as e:
            log.debug("topic ids of %s not asked: %s", wanted[:10], e.args[0].str())
            return NO_IDS
        self.requests += 1
        return PendingIds(futures, self.config.request_timeout_s)

    def now(self, topics: Sequence[str]) -> dict[str, str]:
        """The ids of ``topics`` (those known), waiting for the answer."""
        return self.ask(topics).result()

    def _cluster_answers(self) -> bool:
        """Whether the cluster's metadata names a controller among its brokers (admin requests wait for one)."""
        if self._clock() - self._checked_at < self.config.discovery_interval_s:
            return self._answers
        try:
            md = self._client().list_topics(timeout=self.config.request_timeout_s)
        except KafkaException as e:
            log.debug("cluster metadata for topic ids failed: %s", e.args[0].str())
            return False  # asked again at the next plan
        answers = md.controller_id in md.brokers
        if answers != self._answers or self._checked_at == float("-inf"):
            log.log(logging.DEBUG if answers else logging.INFO, "pipeline %s: %s", self.topology_id,
                    "topic ids are asked of the cluster" if answers else
                    f"the cluster at {self.config.bootstrap_servers} names no live controller, so it cannot tell "
                    "topic ids: a re-created topic is told from the old one by its offsets alone")
        self._answers, self._checked_at = answers, self._clock()
        return answers

    def close(self) -> None:
        """Let the admin client go (librdkafka destroys it when the last reference is dropped)."""
        self._admin, self._checked_at = None, float("-inf")

    def _client(self) -> AdminClient:
        if self._admin is None:
            conf = {k: v for k, v in self.config.consumer_config(self.topology_id, role="ids").items()
                    if k not in CONSUMER_ONLY}
            self._admin = AdminClient(watched(conf)[0])
        return self._admin
