"""The ``topics:`` section: the Kafka topics the service uses, as they should be on the cluster.

    topics:
      sentences:
        partitions: 6
        replication_factor: 3
        configs: {retention.ms: 604800000, cleanup.policy: delete, min.insync.replicas: 2}

``python -m app topics plan|apply`` compares this declaration with the cluster and creates topics,
adds partitions and sets configs; it never deletes a topic or shrinks one. A config value is a
scalar (sent as a string); the well-known ones are checked here so a typo fails before the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_CONFIG_NAME = re.compile(r"^[a-z][a-z0-9.]*[a-z0-9]$")
_CHOICES = {
    "cleanup.policy": ("delete", "compact", "compact,delete", "delete,compact"),
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "message.timestamp.type": ("CreateTime", "LogAppendTime"),
}
_INTEGERS = {"retention.ms": -1, "retention.bytes": -1, "min.insync.replicas": 1, "segment.ms": 1,
             "segment.bytes": 14, "max.message.bytes": 0, "delete.retention.ms": 0,
             "min.compaction.lag.ms": 0}  # name -> smallest valid value


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """One declared topic; ``replication_factor`` None leaves it to the broker default on creation."""

    name: str
    partitions: int
    replication_factor: int | None = None
    configs: tuple[tuple[str, str], ...] = ()

    def config(self, name: str) -> str | None:
        return dict(self.configs).get(name)

    @property
    def retention_ms(self) -> int | None:
        """The declared ``retention.ms`` (-1: forever), or None when not declared."""
        v = self.config("retention.ms")
        return None if v is None else int(v)


class TopicConfigError(ValueError):
    """A bad value in a topic's ``configs``; ``key`` names the config."""

    def __init__(self, key: str, message: str) -> None:
        self.key, self.message = key, message
        super().__init__(f"{key}: {message}")


def check_configs(configs: dict[str, str], rf: int | None) -> dict[str, str]:
    """The declared topic configs (values as strings) with the well-known ones checked, or TopicConfigError."""
    values: dict[str, str] = {}
    for key, value in configs.items():
        if not _CONFIG_NAME.match(key):
            raise TopicConfigError(key, f"invalid topic config name {key!r}")
        checked = _integer(key, value, _INTEGERS[key]) if key in _INTEGERS else value
        if key in _CHOICES and checked not in _CHOICES[key]:
            raise TopicConfigError(key, f"{checked!r} is not one of {', '.join(_CHOICES[key])}")
        values[key] = checked
    isr = values.get("min.insync.replicas")
    if isr is not None and rf is not None and int(isr) > rf:
        msg = f"{isr} is more than the replication_factor {rf}: no write could ever be acknowledged"
        raise TopicConfigError(key="min.insync.replicas", message=msg)
    return dict(sorted(values.items()))


def _integer(key: str, raw: str, minimum: int) -> str:
    if not re.fullmatch(r"-?\d+", raw.strip()):
        raise TopicConfigError(key, f"expected an integer, got {raw!r}")
    if int(raw) < minimum:
        raise TopicConfigError(key, f"must be >= {minimum}, got {int(raw)}")
    return str(int(raw))


MIN_RETENTION_MS = 24 * 3600 * 1000  # a day to notice and repair a stopped pipeline before records expire


def retention_warnings(config: Any) -> list[str]:
    """Warnings for source topics whose declared ``retention.ms`` could expire records before they are read.

    A source topic must keep records for longer than a stopped pipeline can go unrepaired: the
    readiness window and the lease TTL (before a stall is reported and its lease expires), plus
    a day to repair it. Shorter is allowed (``data_loss`` decides what happens) but warned about.
    Caps only bound how fast the backlog is read afterwards, which depends on the input rate.
    """
    declared = {t.name: t for t in config.declared_topics()}
    out = []
    for p in config.pipelines:
        pattern = p.spout.topic_pattern
        sources = [t for t in declared.values()
                   if t.name in p.spout.topics or (pattern and re.fullmatch(pattern, t.name))]
        window = config.service.ready_window_s
        stall_ms = int((window + p.lease_ttl_s) * 1000)
        needed = MIN_RETENTION_MS + stall_ms
        for t in sources:
            r = t.retention_ms
            if r is None or r < 0:
                continue
            if r < needed:
                out.append(f"topics.{t.name}.configs.retention.ms: {r} ms ({r / 3_600_000:.1f} h) is shorter than "
                           f"the {needed} ms pipeline {p.id!r} needs (the readiness window {window:g} s "
                           f"+ lease TTL {p.lease_ttl_s:g} s before a stall shows, + a day to repair it): records "
                           f"could expire before they are read (then data_loss={p.spout.data_loss.value} decides)")
    return out
