"""Typed settings of the Cassandra backends: where the cluster is, how to talk to it, how hard to retry.

Plain frozen dataclasses (picklable, hashable: one shared session per distinct settings and
process). Secrets are :class:`Secret` so they never show in a repr, a log line or a traceback.
Build them in code or from a config mapping with :meth:`CassandraSettings.from_mapping`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from states.cassandra.shards import check_shards
from states.spec import check_identifier

CONSISTENCY_LEVELS = frozenset({"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM",
                                "LOCAL_ONE"})
SERIAL_LEVELS = frozenset({"SERIAL", "LOCAL_SERIAL"})


@dataclass(frozen=True, slots=True)
class Secret:
    """A password or key: compared and hashed by value, never printed."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret('********')"

    def get(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """TLS to the cluster. ``ca_file`` verifies the nodes; ``cert_file``/``key_file`` for client auth."""

    enabled: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True


@dataclass(frozen=True, slots=True)
class CassandraSettings:
    """How the state backends reach Cassandra.

    ``consistency`` is used for reads and plain writes, and for the commit phase of lightweight
    transactions; ``serial_consistency`` for their Paxos phase and for resolving unknown outcomes.
    Which pairs keep exactly-once on which replication: :mod:`states.cassandra.guarantees` (the
    service refuses the others unless ``accept_weak_consistency``).
    ``max_concurrency`` caps the requests in flight per call. Reads and plain writes that fail
    with Unavailable, Overloaded or a timeout are retried up to ``max_retries`` times with
    exponential backoff from ``backoff_initial_s`` to ``backoff_max_s``; a lightweight transaction
    is never retried blindly (see ``states.cassandra.unknown``). ``shards`` > 0 lays state tables out with
    that many keys' partitions (``states.cassandra.shards``): a commit is one conditional batch per shard; unset,
    each table is used as it was created and a new one gets ``DEFAULT_SHARDS`` (:func:`~.schema.shards_in_use`).
    """

    contact_points: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "trident"
    local_dc: str | None = None  # None: the data centre of the first contact point
    consistency: str = "LOCAL_QUORUM"
    serial_consistency: str = "LOCAL_SERIAL"
    username: str | None = None
    password: Secret | None = None
    tls: TlsSettings = TlsSettings()
    max_concurrency: int = 64
    max_retries: int = 5
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0
    request_timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    reconnect_base_s: float = 1.0  # a node marked down is retried after this, doubling up to the max
    reconnect_max_s: float = 60.0
    protocol_version: int | None = None  # None: negotiate
    create_keyspace: bool = True  # CREATE KEYSPACE IF NOT EXISTS with ``replication`` below
    replication: tuple[tuple[str, str], ...] = (("class", "SimpleStrategy"), ("replication_factor", "1"))
    shards: int | None = None  # 0: a partition per key; None: each table as it was created, a new one DEFAULT_SHARDS
    # A consistency pair that loses exactly-once on the keyspace's replication (states.cassandra.guarantees)
    # runs with a warning instead of being refused.
    accept_weak_consistency: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.contact_points, str):
            object.__setattr__(self, "contact_points", tuple(p.strip() for p in self.contact_points.split(",")))
        if isinstance(self.password, str):
            object.__setattr__(self, "password", Secret(self.password))
        if isinstance(self.replication, Mapping):
            options = tuple(sorted((str(k), str(v)) for k, v in self.replication.items()))
            object.__setattr__(self, "replication", options)
        check_identifier(self.keyspace, "keyspace name")
        if not self.contact_points or not all(self.contact_points):
            msg = "contact_points must name at least one host"
            raise ValueError(msg)
        if self.consistency not in CONSISTENCY_LEVELS:
            msg = f"consistency {self.consistency!r} is not one of {sorted(CONSISTENCY_LEVELS)}"
            raise ValueError(msg)
        if self.serial_consistency not in SERIAL_LEVELS:
            msg = f"serial_consistency {self.serial_consistency!r} is not one of {sorted(SERIAL_LEVELS)}"
            raise ValueError(msg)
        if (self.username is None) != (self.password is None):
            msg = "set both username and password, or neither"
            raise ValueError(msg)
        if self.shards is not None:
            check_shards(self.shards)
        if self.max_concurrency < 1 or self.max_retries < 0:
            msg = "max_concurrency must be >= 1 and max_retries >= 0"
            raise ValueError(msg)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CassandraSettings:
        """Settings from a config section (unknown keys are an error; ``tls`` may be a mapping)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            msg = f"unknown cassandra settings {unknown}; known: {sorted(known)}"
            raise ValueError(msg)
        values = dict(config)
        if isinstance(values.get("tls"), Mapping):
            values["tls"] = TlsSettings(**values["tls"])
        if isinstance(values.get("contact_points"), list):
            values["contact_points"] = tuple(values["contact_points"])
        return cls(**values)
