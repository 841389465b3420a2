"""Typed settings of the Kafka spouts, and the librdkafka configurations derived from them.

Every librdkafka property passes through ``properties`` (SASL, TLS, timeouts). Secrets in it are
never shown: :func:`redact` replaces them wherever settings are printed or logged.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from spouts.kafka.formats.registry import RegistrySettings
from spouts.kafka.formats.spec import BYTES, RecordFormat
from spouts.protocols import DataLossPolicy


class FirstPoll(enum.Enum):
    """Where a partition starts when there is no usable stored metadata (storm-kafka-client's names).

    The plain strategies treat metadata stored by another topology id as absent (a new topology
    starts fresh); the ``UNCOMMITTED_*`` ones resume from stored metadata whenever there is some.
    """

    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    UNCOMMITTED_EARLIEST = "uncommitted_earliest"
    UNCOMMITTED_LATEST = "uncommitted_latest"
    UNCOMMITTED_TIMESTAMP = "uncommitted_timestamp"

    @property
    def uncommitted(self) -> bool:
        return self.name.startswith("UNCOMMITTED_")

    @property
    def position(self) -> str:
        """``earliest``, ``latest`` or ``timestamp``: where the first poll starts."""
        return self.name.removeprefix("UNCOMMITTED_").lower()


ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
#: How Spark's read tasks read a range: the native reader where it is built, always, or confluent-kafka's messages.
READERS = ("auto", "native", "python")

#: Properties the spout sets itself because correctness depends on them.
RESERVED_PROPERTIES = frozenset({
    "bootstrap.servers", "group.id", "isolation.level", "enable.auto.commit", "enable.auto.offset.store",
    "enable.partition.eof", "auto.offset.reset",
})

_SECRET_NAME = re.compile(r"password|secret|ssl\.key\.pem|sasl\.oauthbearer\.config|sasl\.jaas\.config", re.IGNORECASE)


def is_secret(name: str) -> bool:
    """Whether a librdkafka property holds a secret (anything named like a password or secret)."""
    return bool(_SECRET_NAME.search(name))


def redact(props: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``props`` that is safe to print: secret values replaced by ``'***'``."""
    return {k: ("***" if is_secret(k) else v) for k, v in props.items()}


@dataclass(frozen=True, slots=True, repr=False)
class KafkaSpoutConfig:
    """What a Kafka spout reads and how. Exactly one of ``topics`` / ``topic_pattern`` is set.

    ``topic_pattern`` is a regular expression that must match a whole topic name (Java's
    ``matches``); topics starting with ``__`` (Kafka's internal ones) are never matched by a pattern.
    ``group_id`` is only for publishing committed offsets to monitoring (default ``trident-<topology
    id>``); the spout never reads it back. Timeouts are in seconds: ``request_timeout_s`` bounds a
    watermark or timestamp query while planning, ``read_timeout_s`` how long reading a range may make
    no progress before the partition counts as unavailable. ``reader`` picks how Spark's read tasks read a
    range (:data:`READERS`): ``native`` (:mod:`spouts.kafka.native`), ``python`` (confluent-kafka's messages) or
    ``auto``, native where it is built.
    """

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    first_poll: FirstPoll = FirstPoll.UNCOMMITTED_EARLIEST
    first_poll_timestamp_ms: int | None = None
    data_loss: DataLossPolicy = DataLossPolicy.FAIL
    isolation_level: str = "read_committed"
    discovery_interval_s: float = 30.0
    group_id: str | None = None
    request_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    exact_record_counts: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    key_format: RecordFormat = BYTES  # how keys and values decode (spouts.kafka.formats)
    value_format: RecordFormat = BYTES
    schema_registry: RegistrySettings | None = None  # for the avro, protobuf and json_schema formats
    reader: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "key_format", RecordFormat.of(self.key_format))
        object.__setattr__(self, "value_format", RecordFormat.of(self.value_format))
        self._check_registry_formats()
        object.__setattr__(self, "properties", MappingProxyType({str(k): str(v) for k, v in self.properties.items()}))
        self._check_topics()
        if not self.bootstrap_servers:
            msg = "bootstrap_servers is required"
            raise ValueError(msg)
        if self.first_poll.position == "timestamp" and self.first_poll_timestamp_ms is None:
            msg = f"first_poll {self.first_poll.name} needs first_poll_timestamp_ms"
            raise ValueError(msg)
        if self.reader not in READERS:
            msg = f"reader must be one of {READERS}, not {self.reader!r}"
            raise ValueError(msg)
        if self.isolation_level not in ISOLATION_LEVELS:
            msg = f"isolation_level must be one of {ISOLATION_LEVELS}, not {self.isolation_level!r}"
            raise ValueError(msg)
        reserved = RESERVED_PROPERTIES & set(self.properties)
        if reserved:
            msg = f"properties {sorted(reserved)} are set by the spout; use the typed settings instead"
            raise ValueError(msg)
        if min(self.discovery_interval_s, self.request_timeout_s, self.read_timeout_s) < 0:
            msg = "intervals and timeouts must be >= 0"
            raise ValueError(msg)

    def _check_registry_formats(self) -> None:
        """A registry format needs ``schema_registry``, and a subject it can name for the topics."""
        for part, fmt in (("key", self.key_format), ("value", self.value_format)):
            if fmt.type.registry:
                if self.schema_registry is None:
                    msg = f"{part}_format {fmt.type.value} needs schema_registry (its url)"
                    raise ValueError(msg)
                fmt.subject_for(self.topics if self.topic_pattern is None else (), part)

    def _check_topics(self) -> None:
        """Exactly one of ``topics`` and ``topic_pattern``, the pattern a regular expression."""
        if bool(self.topics) == (self.topic_pattern is not None):
            msg = "set exactly one of topics (a list) or topic_pattern (a regular expression)"
            raise ValueError(msg)
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as e:
                msg = f"topic_pattern {self.topic_pattern!r} is not a regular expression: {e}"
                raise ValueError(msg) from e

    def __repr__(self) -> str:
        target = f"topics={list(self.topics)!r}" if self.topics else f"topic_pattern={self.topic_pattern!r}"
        return (f"KafkaSpoutConfig(bootstrap_servers={self.bootstrap_servers!r}, {target}, "
                f"first_poll={self.first_poll.name}, data_loss={self.data_loss.name}, "
                f"isolation_level={self.isolation_level!r}, properties={redact(self.properties)!r}"
                f"{self._formats()})")

    def _formats(self) -> str:
        out = "".join(f", {p}_format={f.describe()!r}" for p, f in (("key", self.key_format), ("value", self.value_format))
                      if f != BYTES)
        return out + (f", schema_registry={self.schema_registry!r}" if self.schema_registry else "")

    def __hash__(self) -> int:
        values = tuple(getattr(self, f) for f in self.__dataclass_fields__ if f != "properties")
        return hash((values, tuple(sorted(self.properties.items()))))

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle; ship a plain dict and rebuild.
        values = {f: getattr(self, f) for f in self.__dataclass_fields__}
        values["properties"] = dict(self.properties)
        return (_rebuild, (values,))

    def group(self, topology_id: str) -> str:
        """The consumer group offsets are published to (monitoring only)."""
        return self.group_id or f"trident-{topology_id}"

    def consumer_config(self, topology_id: str, role: str = "read", *,
                        range_records: int | None = None) -> dict[str, str]:
        """librdkafka settings of an assign-only consumer that never commits, with EOF events on.

        ``role`` ("read" or "plan") keeps planning queries off reading consumers: a reader's
        long-polling fetch would otherwise delay a watermark query on the same broker connection.
        ``fetch.wait.max.ms`` defaults to 10: a range read that reached the log end leaves a
        long-polling fetch in flight, and the next range's fetch waits behind it (readers unassign
        after each range, so they never poll idly). ``range_records`` (the size of the ranges the
        consumer reads) sizes its prefetch, see :func:`prefetch_for`. User properties override these
        defaults, never the settings correctness depends on.
        """
        conf: dict[str, str] = {"client.id": f"trident-{topology_id}", "fetch.wait.max.ms": "10"}
        if range_records is not None:
            conf.update(prefetch_for(range_records))
        conf.update(self.properties)
        conf.update({
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group(topology_id),
            "isolation.level": self.isolation_level,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",  # a fetch below the log start must surface, never jump
        })
        if role != "read":
            conf["client.id"] = f"{conf['client.id']}-{role}"
        return conf


#: Bounds of a reading consumer's prefetch queue (records); librdkafka's own default is the upper one.
PREFETCH_MIN, PREFETCH_MAX = 1024, 100_000
#: Bytes one fetch may return per partition (librdkafka's default is 1 MiB).
READ_FETCH_BYTES = 262_144


def prefetch_for(range_records: int) -> dict[str, str]:
    """Prefetch settings that keep a range read from fetching far past the range's end.

    librdkafka fetches ahead until ``queued.min.messages`` records are queued (100,000 by default),
    and the reader unassigns at the range's end, so a small range made it receive and drop many
    times the range (figures in docs/performance.md, "A read fetches about its range"). The queue is sized to a
    quarter of the range (a power of two, so consumers of similar ranges share a pool), a fetch to
    256 KiB, and ``fetch.queue.backoff.ms`` lowered from 1 s: with a small queue, the default
    backoff stalls the read each time the queue fills.
    """
    queued = min(PREFETCH_MAX, max(PREFETCH_MIN, 1 << max(0, (range_records // 4).bit_length() - 1)))
    return {"queued.min.messages": str(queued), "max.partition.fetch.bytes": str(READ_FETCH_BYTES),
            "fetch.queue.backoff.ms": "5"}


def _rebuild(values: dict[str, Any]) -> KafkaSpoutConfig:
    return KafkaSpoutConfig(**values)
