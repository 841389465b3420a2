"""``/readyz`` lists every pipeline from the start, ``starting`` with what the service is doing."""

from __future__ import annotations

from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from app.config import loads
from app.metrics import Metrics
from app.service.process import Service


def test_readyz_lists_each_pipeline_as_starting_before_it_runs(tmp_path: Path) -> None:
    pipeline = {"spout": {"topics": ["t"]}, "group_by": ["word"],
                "transforms": [{"map": ["CAST(value AS STRING) AS word"]}], "aggregates": [{"count": {"as": "n"}}]}
    doc = {"kafka": {"bootstrap_servers": "127.0.0.1:1"},
           "pipelines": [{"id": name, **pipeline, "state": {"backend": "sqlite", "table": name,
                                                             "sqlite_path": str(tmp_path / f"{name}.db")}}
                         for name in ("p1", "p2")]}
    service = Service(loads(yaml.safe_dump(doc)), metrics=Metrics(CollectorRegistry()))
    ready, body = service.readiness()
    assert not ready
    assert sorted(body["pipelines"]) == ["p1", "p2"]
    for status in body["pipelines"].values():
        assert status["state"] == "starting"
        assert not status["ready"]
        assert status["since"] is not None
        assert status["reason"] == "checking the servers"
