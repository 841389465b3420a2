"""The replica lane runs only as ``make test-replicas`` (``REPLICA_LANE=1``): it starts a cluster of 3 Cassandra nodes
and 3 Kafka brokers, minutes of work the main suite does not pay. ``REPLICA_SCENARIOS=a,c`` selects scenarios (all by
default); ``REPLICA_ROUNDS`` sets how many faults a repeated scenario injects (3; CI's short form 1);
``REPLICA_SHORT=1`` runs each scenario of both table layouts on one layout only (CI's short form: a on the sharded
table, b on a partition per key); ``REPLICA_CLUSTER_DATA`` names the ``REALSTACK_DATA`` of a cluster already running (its addresses exported), used
as it is."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replicas.cluster import Cluster

LANE = os.environ.get("REPLICA_LANE") == "1"
SHORT_LAYOUTS = {"a": "sharded", "b": "partition-per-key"}  # the layout each scenario runs on in the short form
collect_ignore_glob = [] if LANE else ["test_*.py"]


def scenarios() -> set[str]:
    named = os.environ.get("REPLICA_SCENARIOS", "").strip()
    return {s.strip() for s in named.split(",") if s.strip()} if named else set("abcdefg")


def rounds() -> int:
    return int(os.environ.get("REPLICA_ROUNDS", "3"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) the scenarios REPLICA_SCENARIOS leaves out: they are reported as deselected."""
    wanted = scenarios()
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marks = [m.args[0] for m in item.iter_markers("scenario")]
        layout = getattr(getattr(item, "callspec", None), "params", {}).get("layout")
        short_layout = next((SHORT_LAYOUTS[m] for m in marks if m in SHORT_LAYOUTS), None)
        short = os.environ.get("REPLICA_SHORT") == "1" and layout is not None and layout != short_layout
        (keep if (not marks or set(marks) & wanted) and not short else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The replicated cluster: REPLICA_CLUSTER_DATA's, or one started for the session (stopped and wiped after)."""
    named = os.environ.get("REPLICA_CLUSTER_DATA")
    c = Cluster.running(Path(named)) if named else Cluster.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
