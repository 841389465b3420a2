"""The HTTP endpoints: /healthz, /readyz (200 or 503 with the reason), /metrics with the trident_* metrics."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.service.endpoints import HttpServer


def get(server: HttpServer, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


class Readiness:
    def __init__(self) -> None:
        self.ready = False
        self.fail = False

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        if self.fail:
            raise RuntimeError("store unreachable")
        return self.ready, {"pipelines": {"p": {"ready": self.ready, "lease_held": self.ready}}}


@pytest.fixture
def served() -> Iterator[tuple[HttpServer, Readiness, Metrics]]:
    metrics = Metrics(CollectorRegistry())
    readiness = Readiness()
    server = HttpServer("127.0.0.1", 0, readiness, metrics.registry).start()
    try:
        yield server, readiness, metrics
    finally:
        server.close()


def test_healthz_answers_while_the_process_lives(served: tuple[HttpServer, Readiness, Metrics]) -> None:
    """/healthz (given no liveness check) is 200 whatever the pipelines do: it only says the process serves."""
    server, readiness, _ = served
    assert get(server, "/healthz")[0] == 200
    readiness.fail = True
    assert get(server, "/healthz")[0] == 200


def test_readyz_follows_the_readiness_check(served: tuple[HttpServer, Readiness, Metrics]) -> None:
    """/readyz is 503 with the per-pipeline reason until ready, then 200; a failing check is 503, not a crash."""
    server, readiness, _ = served
    status, ctype, body = get(server, "/readyz")
    assert status == 503
    assert ctype == "application/json"
    assert json.loads(body) == {"ready": False, "pipelines": {"p": {"ready": False, "lease_held": False}}}
    readiness.ready = True
    status, _, body = get(server, "/readyz")
    assert status == 200
    assert json.loads(body)["ready"] is True
    readiness.fail = True
    status, _, body = get(server, "/readyz")
    assert status == 503
    assert "store unreachable" in json.loads(body)["error"]


def test_metrics_exposes_the_trident_metrics(served: tuple[HttpServer, Readiness, Metrics]) -> None:
    """/metrics is Prometheus text with the service's trident_* families and their current values."""
    server, _, metrics = served
    metrics.batches.labels("p", "committed").inc(3)
    metrics.committed_txid.labels("p").set(42)
    metrics.lease_held.labels("p").set(1)
    status, ctype, body = get(server, "/metrics")
    text = body.decode()
    assert status == 200
    assert ctype.startswith("text/plain")
    assert 'trident_batches_total{outcome="committed",pipeline="p"} 3.0' in text
    assert 'trident_committed_txid{pipeline="p"} 42.0' in text
    assert 'trident_lease_held{pipeline="p"} 1.0' in text
    for family in ("trident_records_total", "trident_phase_seconds", "trident_partition_lag",
                   "trident_cas_conflicts_total", "trident_data_loss_events_total"):
        assert f"# TYPE {family.removesuffix('_total')}" in text


def test_unknown_paths_are_404(served: tuple[HttpServer, Readiness, Metrics]) -> None:
    """Anything else is a 404 that names the three endpoints."""
    server, _, _ = served
    status, _, body = get(server, "/")
    assert status == 404
    assert b"/readyz" in body
