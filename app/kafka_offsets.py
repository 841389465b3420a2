"""Offsets of a pipeline's source partitions from Kafka: which partitions, their watermarks, offsets by time.

Shared by the commands ``status`` (end offsets and lag) and ``rewind`` (earliest, latest, timestamp targets),
and by the audit (each partition's log start).
Queries go through an assign-only consumer with the spout's own settings (SASL, TLS, isolation
level: in ``read_committed`` mode the end offset is the last stable offset, as the spout plans).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from confluent_kafka import Consumer, KafkaException, TopicPartition

from spouts.metadata import Partition

if TYPE_CHECKING:  # the spout's modules load Arrow and pandas: imported when a command queries, not for --help
    from spouts.kafka.config import KafkaSpoutConfig


class KafkaOffsets:
    """One short-lived consumer for a pipeline's offset queries; ``close`` it (or use ``with``)."""

    def __init__(self, config: KafkaSpoutConfig, topology_id: str) -> None:
        from spouts.kafka.access import watched

        self.config = config
        conf, self._watch = watched(config.consumer_config(topology_id, role="ops"))
        self._consumer = Consumer(conf)
        self.timeout_s = config.request_timeout_s

    def partitions(self) -> list[Partition]:
        """The partitions the spout reads now (listed topics that exist, or pattern matches)."""
        try:
            md = self._consumer.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            self._raise_refusal(e)
            raise
        from spouts.kafka.discovery import select_topics

        topics = select_topics(self.config, list(md.topics))
        return sorted(Partition(t, p) for t in topics for p in md.topics[t].partitions)

    def watermarks(self, partitions: Sequence[Partition]) -> dict[Partition, tuple[int, int]]:
        """``(log start, end)`` per partition (the end is the LSO under read_committed)."""
        out = {}
        for p in partitions:
            try:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(p.topic, p.partition),
                                                                 timeout=self.timeout_s, cached=False)
            except KafkaException as e:
                self._raise_refusal(e)
                raise
            out[p] = (int(low), int(high))
        return out

    def _raise_refusal(self, e: KafkaException) -> None:
        """Raise the refusal behind ``e`` (credentials, certificate, ACL) if there is one."""
        from spouts.kafka.access import refused

        found = refused(e.args[0] if e.args else None, self._watch.conf)
        if found is not None:
            raise found from None
        self._watch.check(self._consumer)

    def for_time(self, partitions: Sequence[Partition], timestamp_ms: int) -> dict[Partition, int]:
        """The first offset at or after ``timestamp_ms`` per partition (the end offset when there is none)."""
        asked = [TopicPartition(p.topic, p.partition, timestamp_ms) for p in partitions]
        answers = self._consumer.offsets_for_times(asked, timeout=self.timeout_s)
        ends = self.watermarks(partitions)
        out = {}
        for p, tp in zip(partitions, answers, strict=True):
            if tp.error is not None:
                raise KafkaException(tp.error)
            out[p] = ends[p][1] if tp.offset < 0 else int(tp.offset)
        return out

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kafka_reason(e: BaseException) -> str:
    """librdkafka's own text for a Kafka error, the exception's type and text for anything else."""
    if isinstance(e, KafkaException) and e.args and hasattr(e.args[0], "str"):
        return str(e.args[0].str())
    return f"{type(e).__name__}: {e}"
