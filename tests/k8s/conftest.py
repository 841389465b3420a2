"""Fixtures of the Kubernetes tests: the cluster, the image built from this tree, Kafka and Cassandra for
the pods, and the report. These tests run only when named (``make test-k8s``, ``pytest tests/k8s``): a plain
``pytest`` (``make test``) leaves the folder out, as it needs root, a realk8s and a realstack folder.
``K8S_SCENARIOS=a,b,d`` picks scenarios (default: all); the others are deselected, which pytest reports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.image import build, default_name
from tests.k8s.kit import Cluster
from tests.k8s.peers import PodPeers, pod_peers
from tests.k8s.report import Report

HERE = Path(__file__).resolve().parent
ALL_SCENARIOS = ("image", "a", "b", "d", "e", "c", "f")


def _named(config: pytest.Config) -> bool:
    """Whether the command line names this folder or something in it."""
    for arg in config.invocation_params.args:
        path = Path(config.invocation_params.dir, str(arg).split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name.startswith("test_") and not _named(config):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scenario(key): a scenario of make test-k8s (K8S_SCENARIOS selects them)")


def selected() -> set[str]:
    named = os.environ.get("K8S_SCENARIOS", "").strip()
    keys = {k.strip() for k in named.split(",") if k.strip()} if named else set(ALL_SCENARIOS)
    unknown = keys - set(ALL_SCENARIOS)
    if unknown:
        raise pytest.UsageError(f"K8S_SCENARIOS: unknown {sorted(unknown)} (known: {', '.join(ALL_SCENARIOS)})")
    return keys


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    wanted = selected()
    for item in items:
        marker = item.get_closest_marker("scenario")
        if marker is None or HERE not in Path(str(item.fspath)).parents:
            keep.append(item)
            continue
        item.add_marker(pytest.mark.slow)
        (keep if marker.args[0] in wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def report() -> Iterator[Report]:
    r = Report()
    t0 = time.monotonic()
    yield r
    r.general["lane wall time"] = f"{time.monotonic() - t0:.0f} s (cluster, image, servers and the scenarios run)"
    r.write()


@pytest.fixture(scope="session")
def cluster(report: Report) -> Cluster:
    c = Cluster.up()
    report.general["Kubernetes"] = f"{c.version()} (single node, realk8s)"
    report.general["cluster start"] = f"{c.up_seconds:.1f} s (`up.sh`: 0.4 s when already up)"
    return c


@pytest.fixture(scope="session")
def image(cluster: Cluster, report: Report) -> str:
    """The image built from this tree's Dockerfile and loaded into the cluster."""
    built = build(default_name(), realk8s=cluster.home, env=cluster.env)
    size = None
    for _ in range(30):  # the kubelet lists a new image in the node's status within a minute
        node = cluster.json("get", "nodes")["items"][0]
        sizes = {n: i.get("sizeBytes", 0) for i in node["status"].get("images", []) for n in i.get("names", [])}
        size = sizes.get(built.name)
        if size:
            break
        time.sleep(2)
    report.general["image"] = (f"`{built.name}`, built with {built.builder} in {built.seconds:.0f} s (layers cached "
                               f"from earlier builds where unchanged), {size / 1e6:.0f} MB as the node reports it"
                               if size else f"`{built.name}`, built in {built.seconds:.0f} s")
    return built.name


@pytest.fixture(scope="session")
def peers(cluster: Cluster, report: Report) -> Iterator[PodPeers]:
    t0 = time.monotonic()
    with pod_peers(cluster) as p:
        report.general["servers"] = (f"Kafka and Cassandra from {p.stack.home.name} on the host, started in "
                                     f"{time.monotonic() - t0:.0f} s; pods use Kafka at <node ip>:<port> (advertised) "
                                     "and Cassandra through a forwarder on the node IP")
        yield p
