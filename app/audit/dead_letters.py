"""The dead letters of an audit: every record the recount leaves out as bad is in the dead-letter topic once.

The pipeline's committed dead letters are read back (``read_committed``) from the topic's log start
and matched to the recount's bad records by the source coordinates their headers name
(:func:`app.bad_records.dead_letters.coordinates_of`), for the audited ranges only. A bad record without a dead
letter, one with two, and a dead letter of a record the recount counted as good are differences; a
missing letter while the topic no longer holds its start (retention, records deleted) cannot be told
from one deleted with it, so it is counted as unverifiable instead, and the report says why. After a
rewind, which reads records again on purpose, a record's extra letters are counted, not differences.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.bad_records.dead_letters import Coordinates, coordinates_of
from spouts.kafka.client_log import logged
from spouts.metadata import BatchPlan

TIMEOUT_S = 60.0  # to read the topic back to its end (past an open transaction: its last stable offset)


@dataclass
class DeadLetterCheck:
    """How the recount's bad records compare with the dead-letter topic (``topic`` None: the policy keeps none)."""

    policy: str
    topic: str | None
    bad: int  # distinct source records the recount left out as bad
    in_topic: int = 0  # the pipeline's dead letters for the audited ranges (each copy counted)
    missing: list[Coordinates] = field(default_factory=list)
    twice: dict[Coordinates, int] = field(default_factory=dict)  # how many copies
    unexpected: list[Coordinates] = field(default_factory=list)  # a dead letter of a record counted as good
    unverifiable: int = 0  # missing, but the topic no longer holds its start
    rewound_copies: int = 0  # more than one letter of a record, after a rewind read it again on purpose
    log_start: dict[int, int] = field(default_factory=dict)  # the topic's partitions that start above 0

    @property
    def differences(self) -> int:
        return len(self.missing) + len(self.twice) + len(self.unexpected)

    @property
    def skipped(self) -> int:
        """Bad records left out without a dead letter, as the ``skip`` policy does."""
        return self.bad if self.policy == "skip" else 0

    def to_json(self, limit: int = 1000) -> dict[str, Any]:
        return {"policy": self.policy, "topic": self.topic, "bad_records": self.bad, "in_topic": self.in_topic,
                "skipped": self.skipped, "differences": self.differences, "unverifiable": self.unverifiable,
                "rewound_copies": self.rewound_copies,
                "missing": [list(c) for c in self.missing[:limit]],
                "twice": [{"record": list(c), "copies": n} for c, n in list(self.twice.items())[:limit]],
                "unexpected": [list(c) for c in self.unexpected[:limit]],
                "topic_log_start": {str(p): o for p, o in self.log_start.items()}}


def check(policy: str, topic: str | None, bad: Iterable[Coordinates], *, plan: BatchPlan,
          letters: Counter[Coordinates], log_start: Mapping[int, int], rewound: bool = False) -> DeadLetterCheck:
    """Compare the recount's ``bad`` records of ``plan``'s ranges with the pipeline's ``letters`` (copies per
    source record, all of the topic); ``log_start``: each topic partition's first offset still held;
    ``rewound``: the pipeline was rewound, so a record may have been read, and its letter written, twice."""
    wanted = set(bad)
    result = DeadLetterCheck(policy, topic, len(wanted))
    if topic is None:
        return result
    ours = Counter({c: n for c, n in letters.items() if _in_ranges(c, plan)})
    result.in_topic = sum(ours.values())
    result.log_start = {p: o for p, o in sorted(log_start.items()) if o > 0}
    absent = sorted(c for c in wanted if c not in ours)
    if result.log_start:
        result.unverifiable = len(absent)
    else:
        result.missing = absent
    twice = {c: n for c, n in sorted(ours.items()) if n > 1 and c in wanted}
    if rewound:
        result.rewound_copies = sum(n - 1 for n in twice.values())
    else:
        result.twice = twice
    result.unexpected = sorted(c for c in ours if c not in wanted)
    return result


def _in_ranges(c: Coordinates, plan: BatchPlan) -> bool:
    topic, partition, offset = c
    m = next((m for p, m in plan.partitions.items() if (p.topic, p.partition) == (topic, partition)), None)
    return m is not None and m.first_offset <= offset < m.next_offset


def kafka_of(spout: Any) -> dict[str, str]:
    """The librdkafka settings of the cluster a (Kafka) spout reads: where its dead letters are written."""
    cfg = spout.config
    return {**cfg.properties, "bootstrap.servers": cfg.bootstrap_servers}


def read_letters(kafka: Mapping[str, str], topic: str, pipeline: str,
                 timeout_s: float = TIMEOUT_S) -> tuple[Counter[Coordinates], dict[int, int]]:
    """The pipeline's committed dead letters in ``topic`` (copies per source record) and each partition's log
    start; ``kafka``: librdkafka settings of the dead-letter cluster."""
    consumer = Consumer(logged({**kafka, "group.id": f"trident-{pipeline}-audit", "isolation.level": "read_committed",
                                "enable.auto.commit": "false", "enable.partition.eof": "true",
                                "auto.offset.reset": "earliest"}))
    found: Counter[Coordinates] = Counter()
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            msg = f"dead-letter topic {topic!r} cannot be read: {meta.error if meta else 'not found'}"
            raise LookupError(msg)
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
                 for p in sorted(meta.partitions)}
        todo = {p: low for p, (low, high) in marks.items() if high > low}
        if todo:
            consumer.assign([TopicPartition(topic, p, o) for p, o in todo.items()])
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                msg = f"dead-letter topic {topic!r}: could not read it back to its end; still at {todo}"
                raise TimeoutError(msg)
            for m in consumer.consume(500, timeout=0.2):
                err, p = m.error(), m.partition() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.pop(p, None)
                    continue
                owner, coords = coordinates_of(_headers(m))
                if owner == pipeline and coords is not None:
                    found[coords] += 1
                if (m.offset() or 0) + 1 >= marks[p][1]:
                    todo.pop(p, None)
        return found, {p: low for p, (low, _) in marks.items()}
    finally:
        consumer.close()


def _headers(message: Any) -> list[tuple[str, bytes | None]]:
    raw = message.headers() or ()
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(k, v if v is None or isinstance(v, bytes) else str(v).encode()) for k, v in pairs]
