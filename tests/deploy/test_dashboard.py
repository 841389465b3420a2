"""The Grafana dashboard against the real thing: a real Prometheus scrapes ``python -m app run``
(mock Kafka, SQLite state) while sentences are produced, and every panel's query returns data."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.deploy.chart import CHART
from tests.deploy.prometheus import PrometheusServer, panel_queries
from tests.service.helpers import SentenceProducer, ServiceProcess, free_port, word_count_config

DASHBOARD = CHART / "dashboards" / "trident-stream.json"
RULES = CHART / "rules" / "trident-stream.rules.yaml"
PIPELINE = "dash-words"


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_dashboard_has_the_panels_and_the_pipeline_variable() -> None:
    """Every panel queries with the pipeline variable, whose "All" is the regex .* (series with or without the label)."""
    dashboard = load_dashboard()
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Throughput", "Committed txid", "Lag per partition", "Phase latency (p50, p99)", "Replays",
            "CAS conflicts", "Unknown CAS outcomes", "Data loss", "Lease holder"} <= titles
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["pipeline"]["includeAll"] and variables["pipeline"]["allValue"] == ".*"
    assert variables["datasource"]["type"] == "datasource"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert 'pipeline=~"$pipeline"' in target["expr"], (panel["title"], target["expr"])
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert (CHART.parent / "trident-stream-dashboard.json").read_text() == DASHBOARD.read_text()


def finite(result: list[dict]) -> list[float]:
    return [float(s["value"][1]) for s in result if not math.isnan(float(s["value"][1]))]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_panel_query_returns_data_from_a_scraped_service(prometheus: str, tmp_path: Path) -> None:
    """Prometheus scrapes the running service; each panel's PromQL (variables substituted) returns finite
    samples, the pipeline variable lists the pipeline, and the alert rules load and stay silent."""
    queries = panel_queries(load_dashboard())
    with MockKafkaCluster(1) as kafka:
        kafka.create_topic("sentences", 2, replication=1)
        port = free_port()
        config = word_count_config(tmp_path / "config.yaml", bootstrap=kafka.bootstrap_servers(), topic="sentences",
                                   port=port, pipeline_id=PIPELINE, caps=(200, 400),
                                   state={"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db"),
                                          "table": "word_counts"})
        producer = SentenceProducer(kafka.bootstrap_servers(), "sentences", 2, rate=200)
        service = ServiceProcess(config, tmp_path / "service.log", port)
        producer.start()
        service.start()
        try:
            service.wait_ready(timeout=180)
            with PrometheusServer(prometheus, [f"127.0.0.1:{port}"], [RULES], tmp_path) as prom:
                missing = dict(queries)
                deadline = time.monotonic() + 120
                while missing and time.monotonic() < deadline:
                    service.check_alive()
                    for title, expr in list(missing.items()):
                        if finite(prom.query(expr)):
                            del missing[title]
                    time.sleep(1)
                assert not missing, f"panels without data after 120 s: {missing}\n{service.tail()}"
                for title, expr in queries:  # all of them at once, not only each at some moment
                    assert finite(prom.query(expr)), (title, expr)
                assert PIPELINE in prom.api("label/pipeline/values", **{"match[]": "trident_committed_txid"})
                assert finite(prom.query(f'max(trident_committed_txid{{pipeline="{PIPELINE}"}})'))[0] >= 1
                assert finite(prom.query(f'max(trident_lease_held{{pipeline="{PIPELINE}"}})')) == [1.0]
                rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
                assert len(rules) == 6 and all(r["health"] == "ok" for r in rules), rules
                assert prom.api("alerts")["alerts"] == []
        finally:
            producer.stop()
            service.terminate()
            POOL.close_all()
