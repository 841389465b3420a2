"""What every scenario shares: the chart values for a word count, a producer with its truth, the final
key-by-key comparison, and the figures each scenario reports."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.chaos.truth import TruthProducer, compare
from tests.k8s.peers import PodPeers
from tests.k8s.release import wait_for
from tests.k8s.report import Report

TABLE = "word_counts"
#: Small requests: the test node has two cores shared with the servers. A CPU limit of 1: local[1].
RESOURCES = {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1536Mi"}}


def pipeline(pid: str, topic: str, state: dict[str, Any]) -> dict[str, Any]:
    """Word count of the producer's sentences (words separated by one space)."""
    return {"id": pid, "spout": {"topics": [topic]},
            "transforms": [{"map": ["explode(split(CAST(value AS STRING), ' ')) AS word"]}],
            "group_by": ["word"], "aggregates": [{"count": {"as": "count"}}], "state": state,
            "lease_ttl_s": 10, "idle_sleep_s": 0.5}


def chart_values(image: str, peers: PodPeers, pipelines: list[dict[str, Any]], *, keyspace: str | None = None,
                 **over: Any) -> dict[str, Any]:
    repository, _, tag = image.rpartition(":")
    config: dict[str, Any] = {
        "kafka": {"bootstrap_servers": peers.kafka},
        "spark": {"master": "local[*]", "conf": {"spark.driver.memory": "512m", "spark.ui.enabled": "false"}},
        "service": {"shutdown_grace_s": 20},
        "pipelines": pipelines,
    }
    if keyspace is not None:
        config["cassandra"] = peers.cassandra_values(keyspace)
    values: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "resources": RESOURCES,
        "terminationGracePeriodSeconds": 40,
        "probes": {"startup": {"periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 60}},
        "config": config,
    }
    for key, value in over.items():
        values[key] = value  # noqa: PERF403  a loop reads clearer here
    return values


def settle(what: str, stored: Callable[[], dict[str, int]], truth: Counter[str], timeout: float = 300) -> dict[str, int]:
    """The stored state once it equals the truth, or (timed out) as it is then."""
    try:
        return wait_for(what, lambda: s if (s := stored()) == dict(truth) else {}, timeout, every=2.0)
    except AssertionError:
        return stored()


def assert_exact(fig: dict[str, Any], truth: Counter[str], stored: dict[str, int]) -> None:
    """The key-by-key comparison every scenario ends with; its numbers go to the report."""
    lost, twice, differing = compare(truth, stored)
    fig["words in the truth"] = sum(truth.values())
    fig["keys"] = f"{len(truth)} in the truth, {len(stored)} stored"
    fig["comparison"] = f"lost {lost}, counted twice {twice}, keys differing {differing}"
    assert (lost, twice, differing) == (0, 0, 0), fig["comparison"]
    assert stored == dict(truth)


@contextmanager
def scenario(report: Report, key: str) -> Iterator[dict[str, Any]]:
    """The scenario's figures; its outcome (passed, or the failure) and duration are recorded whatever happens."""
    fig = report.scenario(key)
    t0 = time.monotonic()
    try:
        yield fig
    except BaseException as e:
        fig["outcome"] = f"FAILED: {type(e).__name__}: {str(e)[:300]}"
        raise
    else:
        fig["outcome"] = "passed"
    finally:
        fig["duration"] = f"{time.monotonic() - t0:.0f} s"


def producer(peers: PodPeers, topic: str, *, rate: float = 40, seed: int = 42) -> TruthProducer:
    p = TruthProducer(peers.kafka, topic, 2, rate=rate, seed=seed)
    p.start()
    return p
