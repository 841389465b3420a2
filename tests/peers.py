"""Real peers a test may need, and what an absent one means.

A test that needs a real Kafka or a real Cassandra is SKIPPED with its reason when none is
configured here. With ``REQUIRE_REAL_PEERS=1`` such a skip is a failure naming what is missing,
so a CI that has real clusters proves the real paths instead of quietly skipping them. A skip
whose ground is covered by another real peer of the same kind (a second way to reach a real
Kafka, a gap of the mock that the real peer runs) stays a skip.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import NoReturn

import pytest

REQUIRE_REAL_PEERS = "REQUIRE_REAL_PEERS"


@dataclass(frozen=True)
class RealPeer:
    """A kind of real server some tests need, and how a run provides one."""

    name: str
    how: str


REAL_KAFKA = RealPeer("a real Kafka", "set KAFKA_BOOTSTRAP_SERVERS, or run a Docker engine for testcontainers")
REAL_CASSANDRA = RealPeer("a real Cassandra",
                          "set CASSANDRA_CONTACT_POINTS, or run a Docker engine for testcontainers")


def cassandra_from_env() -> tuple[tuple[str, ...], int] | None:
    """The real Cassandra named by ``CASSANDRA_CONTACT_POINTS`` (``host[:port],...``), its port defaulting to
    ``CASSANDRA_PORT`` (else 9042); None when the variable is unset."""
    env = os.environ.get("CASSANDRA_CONTACT_POINTS", "")
    hosts = [h.strip() for h in env.split(",") if h.strip()]
    if not hosts:
        return None
    default = int(os.environ.get("CASSANDRA_PORT") or 9042)
    split = [h.rsplit(":", 1) if ":" in h else [h, str(default)] for h in hosts]
    return tuple(h for h, _ in split), int(split[0][1])


def replication_from_env() -> tuple[tuple[str, str], ...]:
    """A bench keyspace's replication: ``CASSANDRA_REPLICATION_FACTOR`` replicas (1 by default; 3 on a replicated
    cluster, where each LWT's Paxos rounds go to three replicas)."""
    return (("class", "SimpleStrategy"), ("replication_factor", str(int(os.environ.get("CASSANDRA_REPLICATION_FACTOR", "1")))))


def real_peers_required() -> bool:
    """True when ``REQUIRE_REAL_PEERS`` is set to anything but empty or ``0``."""
    return os.environ.get(REQUIRE_REAL_PEERS, "").strip() not in ("", "0")


def missing_peer(peer: RealPeer, reason: str, *, covered: bool = False) -> NoReturn:
    """Skip for ``reason``; with REQUIRE_REAL_PEERS=1 and no ``peer`` covering it, fail naming the peer."""
    if real_peers_required() and not covered:
        pytest.fail(f"{REQUIRE_REAL_PEERS}=1 but {peer.name} is missing ({peer.how}): {reason}", pytrace=False)
    pytest.skip(reason)


@functools.cache
def docker_problem() -> str | None:
    """None when a Docker engine answers (testcontainers can start peers), else why not (asked once)."""
    try:
        import docker  # testcontainers' dependency

        docker.from_env().ping()
    except Exception as e:  # noqa: BLE001 - no engine, no socket, no permission: all mean "not here"
        return f"{type(e).__name__}: {e}"
    return None
