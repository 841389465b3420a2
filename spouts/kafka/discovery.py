"""The coordinator side of the Kafka spouts: which partitions exist now, and offsets for monitoring.

Partitions come from cluster metadata (``list_topics``), refreshed at most every
``discovery_interval_s``: new partitions and new topics matching the pattern join, deleted ones
leave. After a batch commits, its next offsets are committed to the consumer group ``group_id``
from a background thread, so lag dashboards see the pipeline; they are never read back (the
transactional-state store is the only source of resume offsets), and a failed publish only logs.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from spouts.errors import AccessRefusedError, SourceUnavailableError
from spouts.kafka.access import AccessWatch, refused, serve, watched
from spouts.kafka.config import KafkaSpoutConfig
from spouts.metadata import BatchPlan, Partition

log = logging.getLogger(__name__)


def select_topics(config: KafkaSpoutConfig, available: Sequence[str]) -> list[str]:
    """The topics of ``available`` the spout reads: listed ones that exist, or whole-name pattern matches."""
    if config.topic_pattern is None:
        present = set(available)
        return [t for t in config.topics if t in present]
    pattern = re.compile(config.topic_pattern)
    return sorted(t for t in available if not t.startswith("__") and pattern.fullmatch(t))


class KafkaCoordinator:
    """Discovers partitions (cached for ``discovery_interval_s``) and publishes committed offsets.

    :attr:`problem` says what is wrong with the topics (a listed topic that does not exist, a
    pattern that matches none), or None; a change of it is logged once, as a warning.
    """

    def __init__(self, config: KafkaSpoutConfig, topology_id: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.topology_id, self._clock = config, topology_id, clock
        self._metadata_client: Consumer | None = None
        self._watch: AccessWatch | None = None
        self._known: list[Partition] | None = None
        self._refreshed_at = float("-inf")
        self._publisher = _OffsetPublisher(config, topology_id)
        self.problem: str | None = None

    def partitions(self) -> list[Partition]:
        self._publisher.check()  # a refusal seen while publishing offsets is as permanent as one here
        if self._known is None or self._clock() - self._refreshed_at >= self.config.discovery_interval_s:
            return self.refresh()
        return list(self._known)

    def refresh(self) -> list[Partition]:
        """Read metadata now. If the cluster can't answer, keep the last known partitions (or raise).

        A refusal (credentials, certificate, ACL) is never ridden out: it raises :class:`AccessRefusedError`.
        """
        servers = self.config.bootstrap_servers
        try:
            client = self._metadata_client
            if client is None:
                conf, self._watch = watched(self.config.consumer_config(self.topology_id))
                client = self._metadata_client = Consumer(conf)
            md = client.list_topics(timeout=self.config.request_timeout_s)
        except KafkaException as e:
            self._raise_refusal(e)
            if self._known is None:
                raise SourceUnavailableError(servers, f"partition discovery failed: {e.args[0].str()}") from e
            log.warning("partition discovery at %s failed (%s); keeping %d known partitions", servers,
                        e.args[0].str(), len(self._known))
            return list(self._known)
        if self._watch is not None:
            self._watch.clear()
        readable = [n for n, tm in md.topics.items() if tm.error is None]
        self._refused_topics(client, [t for t in self.config.topics if t not in md.topics])
        found = [Partition(t, p) for t in select_topics(self.config, readable) for p in md.topics[t].partitions]
        found.sort()
        self._report(self._topic_problem(readable, md.topics))
        if self._known is not None and found != self._known:
            joined, left = set(found) - set(self._known), set(self._known) - set(found)
            log.info("partitions changed: %d joined %s, %d left %s", len(joined), sorted(q.id for q in joined)[:10],
                     len(left), sorted(q.id for q in left)[:10])
        self._known, self._refreshed_at = found, self._clock()
        return list(found)

    def _refused_topics(self, client: Consumer, missing: Sequence[str]) -> None:
        """Raise if a listed topic is absent from the metadata because the principal may not see it: Kafka
        leaves topics without a Describe ACL out of a full listing, and only says why when asked by name
        (a consumer's metadata request never creates a topic)."""
        conf = self.config.consumer_config(self.topology_id)
        for topic in missing:
            try:
                md = client.list_topics(topic, timeout=self.config.request_timeout_s)
            except KafkaException:
                return  # the cluster went away meanwhile: the full listing's answer stands
            tm = md.topics.get(topic)
            found = refused(tm.error if tm is not None else None, conf, f"topic {topic}")
            if found is not None:
                raise found

    def _raise_refusal(self, e: KafkaException) -> None:
        conf = self.config.consumer_config(self.topology_id)
        found = refused(e.args[0] if e.args else None, conf, "partition discovery")
        if found is not None:
            raise found from e
        if self._watch is not None and self._metadata_client is not None:
            try:
                self._watch.check(self._metadata_client)
            except AccessRefusedError as refusal:
                raise refusal from e

    def _topic_problem(self, readable: Sequence[str], topics: Mapping[str, Any]) -> str | None:
        servers = self.config.bootstrap_servers
        if self.config.topic_pattern is not None:
            if not select_topics(self.config, readable):
                return f"no topic at {servers} matches topic_pattern {self.config.topic_pattern!r}"
            return None
        missing = [t for t in self.config.topics if t not in readable]
        if not missing:
            return None
        why = [f"{t!r} ({topics[t].error.str()})" if t in topics and topics[t].error else repr(t) for t in missing]
        return f"topic {', '.join(why)} not found at {servers} (misspelled, or not created yet); waiting for it"

    def _report(self, problem: str | None) -> None:
        if problem != self.problem:
            if problem is not None:
                log.warning("topology %s: %s", self.topology_id, problem)
            elif self.problem is not None:
                log.info("topology %s: every topic is there now", self.topology_id)
        self.problem = problem

    def committed(self, plan: BatchPlan) -> None:
        """Publish ``plan``'s next offsets to the monitoring consumer group (asynchronously): those of the
        partitions discovered now (a kept position of a missing topic has no partition to commit to)."""
        known = None if self._known is None else set(self._known)
        self._publisher.publish({m.partition_id: m.next_offset for m in plan if known is None or m.partition_id in known})

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until published offsets reached Kafka (or failed); False on timeout."""
        return self._publisher.flush(timeout)

    def close(self) -> None:
        self._publisher.close()
        if self._metadata_client is not None:
            self._metadata_client.close()
            self._metadata_client = None

    def __getstate__(self) -> dict[str, object]:
        return {"config": self.config, "topology_id": self.topology_id}

    def __setstate__(self, state: dict[str, object]) -> None:
        # Unpickling re-runs __init__ (mypy flags calling it on an instance): clients are never pickled.
        self.__init__(state["config"], state["topology_id"])  # type: ignore[misc]


class _OffsetPublisher:
    """Commits the latest offsets per partition from one daemon thread; newer offsets replace pending ones."""

    def __init__(self, config: KafkaSpoutConfig, topology_id: str) -> None:
        self._conf = config.consumer_config(topology_id)
        self._refused: AccessRefusedError | None = None
        self._cond = threading.Condition()
        self._pending: dict[Partition, int] = {}
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def publish(self, offsets: dict[Partition, int]) -> None:
        if not offsets:
            return
        with self._cond:
            if self._closed:
                return
            self._pending.update(offsets)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kafka-offset-publisher", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def check(self) -> None:
        """Raise the refusal (credentials, certificate, the group's ACL) a publish met, if any."""
        with self._cond:
            found = self._refused
        if found is not None:
            raise found

    def flush(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        conf, watch = watched(self._conf)
        client = Consumer(conf)  # never subscribes: commits need a group id, not membership
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._pending or self._closed)
                    if self._closed and not self._pending:
                        return
                    batch, self._pending, self._busy = self._pending, {}, True
                try:
                    result = client.commit(offsets=[TopicPartition(p.topic, p.partition, o)
                                                    for p, o in sorted(batch.items())], asynchronous=False)
                    watch.clear()
                    failed = [f"{tp.topic}:{tp.partition}" for tp in result or () if tp.error is not None]
                    for tp in result or ():
                        found = refused(tp.error, self._conf, f"group {self._conf['group.id']}")
                        if found is not None:
                            with self._cond:
                                self._refused = found
                    if failed:
                        log.warning("publishing offsets to group %s failed for %s (monitoring only)",
                                    self._conf["group.id"], failed[:10])
                except KafkaException as e:
                    group = f"group {self._conf['group.id']}"
                    serve(client)
                    found = refused(e.args[0] if e.args else None, self._conf, group) or watch.refusal
                    if found is not None:
                        with self._cond:
                            self._refused = found
                    log.warning("publishing offsets to %s failed (monitoring only): %s", group, e.args[0].str())
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
        finally:
            client.close()
