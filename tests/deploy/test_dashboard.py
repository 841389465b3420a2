"""The Grafana dashboard against the real thing: a real Prometheus scrapes ``python -m app run``
(mock Kafka, SQLite state) while sentences are produced, and every panel's query returns data.

A second pipeline of the same service meets real data loss: once it has committed its first records
and gone idle, more records are produced and deleted from the log (as retention would) before it
reads them; with ``data_loss: skip`` it counts the event and the skipped offsets, which the data-loss
panel and alert must show."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.deploy.chart import CHART
from tests.deploy.prometheus import PrometheusServer, panel_queries
from tests.service.helpers import SentenceProducer, ServiceProcess, free_port, word_count_config

DASHBOARD = CHART / "dashboards" / "trident-stream.json"
RULES = CHART / "rules" / "trident-stream.rules.yaml"
PIPELINE = "dash-words"
EXPIRING = "dash-expiring"  # the pipeline that loses data
IDLE_SLEEP_S = 15  # its wait when idle: the window in which records are produced and deleted unread


def add_expiring_pipeline(config: Path, db: Path) -> None:
    """A pipeline counting the records of topic ``expiring``, skipping data loss, one txid at a time
    (and long leases for both pipelines)."""
    doc = yaml.safe_load(config.read_text())
    doc["pipelines"][0]["lease_ttl_s"] = 180  # a first Spark job on a loaded machine can outlast the default 30 s
    doc["pipelines"].append({"id": EXPIRING, "lease_ttl_s": 180,
                             "spout": {"topics": ["expiring"], "first_poll": "earliest", "data_loss": "skip"},
                             "aggregates": [{"count": {"as": "records"}}], "max_pending": 1,
                             "idle_sleep_s": IDLE_SLEEP_S,
                             "state": {"sqlite_path": str(db), "table": "expiring_total"}})
    config.write_text(yaml.safe_dump(doc, sort_keys=False))


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, f"record {i}".encode(), partition=0)
    assert producer.flush(30) == 0


def sample(metrics_text: str, name: str, pipeline: str) -> float | None:
    m = re.search(rf'^{name}\{{[^}}]*pipeline="{pipeline}"[^}}]*\}} (\S+)$', metrics_text, re.MULTILINE)
    return None if m is None else float(m.group(1))


def lose_records(kafka: MockKafkaCluster, service: ServiceProcess) -> None:
    """Once the expiring pipeline committed its first 20 records and planned an empty txid (lag 0, now idle),
    produce 20 more and delete all 40 from the log before it wakes up and reads them."""
    deadline = time.monotonic() + 90
    while True:
        text = service.get("/metrics")[1].decode()
        if (sample(text, "trident_committed_txid", EXPIRING) or 0) >= 1 and \
                sample(text, "trident_partition_lag", EXPIRING) == 0:
            break
        assert time.monotonic() < deadline, f"expiring pipeline never went idle\n{service.tail()}"
        time.sleep(0.2)
    produce(kafka.bootstrap_servers(), "expiring", 20)
    kafka.delete_records("expiring", 0, before_offset=40)


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


#: Panels fed by the kubelet (cAdvisor) and kube-state-metrics, which the test's Prometheus does not
#: scrape: their queries must be valid, and are empty here.
KUBERNETES_PANELS = {"Container memory (JVM included)"}
#: Panels of a cluster master only (the Spark executors): valid and empty on the local master here.
CLUSTER_PANELS = {"Spark executors"}
#: Panels fed by the audit command's metrics file (a textfile collector), not by the service: valid and empty here.
AUDIT_PANELS = {"Last audit"}
#: Panels of sharded Cassandra tables (the service here keeps its state in SQLite): valid and empty here.
PARTITION_PANELS = {"Largest partition (sharded tables)"}
FILTER = 'namespace=~"$namespace", instance=~"$instance", pipeline=~"$pipeline"'
#: trident_ metrics of the process, not of a pipeline: selected by namespace and instance, and joined
#: with the pipeline state of the selected pipelines.
PROCESS_FILTER = 'namespace=~"$namespace", instance=~"$instance"'
PROCESS_METRICS = {"trident_spark_executors"}


def test_dashboard_has_the_rows_panels_and_variables() -> None:
    """A health row first; every query filters by the namespace variable, and every selector of a trident_
    metric by namespace, instance and pipeline, whose "All" is the regex .* (series with or without the label)."""
    dashboard = load_dashboard()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Health", "Progress", "Failures and data quality", "State store and lease", "Process"]
    assert [p["title"] for p in dashboard["panels"][1:4]] == ["Target up", "Pipeline state", "Permanent failures (1h)"]
    titles = {p["title"] for p in panels}
    assert {"Throughput", "Committed txid", "Lag per partition", "Lag in seconds", "Phase latency (p50, p99)",
            "Replays", "Bad records and dead letters", "CAS conflicts", "Unknown CAS outcomes", "Data loss",
            "Lease holder", "Process CPU", "Process memory", "Python GC"} | KUBERNETES_PANELS | CLUSTER_PANELS | \
        AUDIT_PANELS | PARTITION_PANELS <= titles
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "instance", "pipeline"]
    for name in ("namespace", "instance", "pipeline"):
        assert variables[name]["includeAll"]
        assert variables[name]["allValue"] == ".*"
    assert variables["datasource"]["type"] == "datasource"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            expr = target["expr"]
            assert 'namespace=~"$namespace"' in expr, (panel["title"], expr)
            selectors = re.findall(r"(trident_\w+)\{([^}]*)\}", expr)
            assert all(s == (PROCESS_FILTER if m in PROCESS_METRICS else FILTER) for m, s in selectors), \
                (panel["title"], expr)
            if any(m in PROCESS_METRICS for m, _ in selectors):
                assert f"group by (namespace, job, instance) (trident_pipeline_state{{{FILTER}}})" in expr
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert (CHART.parent / "trident-stream-dashboard.json").read_text() == DASHBOARD.read_text()


def finite(result: list[dict]) -> list[float]:
    return [float(s["value"][1]) for s in result if not math.isnan(float(s["value"][1]))]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_panel_query_returns_data_from_a_scraped_service(prometheus: str, tmp_path: Path) -> None:
    """Prometheus scrapes the running service; each panel's PromQL (variables substituted) returns finite
    samples (the Kubernetes panels, fed by exporters not running here, are valid and empty), the
    variables list the pipeline and the instance, the Spark executors panel is empty on
    a local master, the data-loss panel counts exactly the loss caused,
    of the alerts only TridentDataLoss fires, and once the service is stopped "Target up" shows 0,
    not nothing."""
    elsewhere = KUBERNETES_PANELS | CLUSTER_PANELS | AUDIT_PANELS | PARTITION_PANELS
    queries = [(t, e) for t, e in panel_queries(load_dashboard()) if t not in elsewhere]
    empty_queries = [(t, e) for t, e in panel_queries(load_dashboard()) if t in elsewhere]
    with MockKafkaCluster(1) as kafka:
        kafka.create_topic("sentences", 2, replication=1)
        kafka.create_topic("expiring", 1, replication=1)
        produce(kafka.bootstrap_servers(), "expiring", 20)
        port = free_port()
        config = word_count_config(tmp_path / "config.yaml", bootstrap=kafka.bootstrap_servers(), topic="sentences",
                                   port=port, pipeline_id=PIPELINE, caps=(200, 400),
                                   state={"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db"),
                                          "table": "word_counts"})
        add_expiring_pipeline(config, tmp_path / "state.db")
        producer = SentenceProducer(kafka.bootstrap_servers(), "sentences", 2, rate=200)
        service = ServiceProcess(config, tmp_path / "service.log", port)
        producer.start()
        service.start()
        try:
            service.wait_ready(timeout=180)
            lose_records(kafka, service)
            with PrometheusServer(prometheus, [f"127.0.0.1:{port}"], [RULES], tmp_path) as prom:
                missing = dict(queries)
                loss_alert: list[dict] = []
                deadline = time.monotonic() + 120
                while (missing or not loss_alert) and time.monotonic() < deadline:
                    service.check_alive()
                    for title, expr in list(missing.items()):
                        if finite(prom.query(expr)):
                            del missing[title]
                    loss_alert = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "TridentDataLoss"]
                    time.sleep(1)
                assert not missing, f"panels without data after 120 s: {missing}\n{service.tail()}"
                assert loss_alert, f"TridentDataLoss never fired\n{service.tail()}"
                assert loss_alert[0]["state"] == "firing"
                assert loss_alert[0]["labels"] | {"pipeline": EXPIRING, "topic": "expiring", "partition": "0",
                                                  "policy": "skip"} == \
                    loss_alert[0]["labels"]
                for title, expr in queries:  # all of them at once, not only each at some moment
                    assert finite(prom.query(expr)), (title, expr)
                assert PIPELINE in prom.api("label/pipeline/values", **{"match[]": "trident_committed_txid"})
                assert f"127.0.0.1:{port}" in prom.api("label/instance/values", **{"match[]": "trident_committed_txid"})
                for title, expr in empty_queries:
                    assert prom.query(expr) == [], (title, expr)  # valid PromQL; no kubelet, a local master
                states = {s["metric"]["pipeline"]: s["metric"]["state"]
                          for s in prom.query(dict(queries)["Pipeline state"])}
                assert states == {PIPELINE: "active", EXPIRING: "active"}
                assert finite(prom.query(dict(queries)["Target up"])) == [1.0]
                assert finite(prom.query(f'max(trident_committed_txid{{pipeline="{PIPELINE}"}})'))[0] >= 1
                assert finite(prom.query(f'max(trident_lease_held{{pipeline="{PIPELINE}"}})')) == [1.0]
                data_loss = [e for t, e in queries if t == "Data loss"]
                assert [finite(prom.query(e)) for e in data_loss] == [[1.0], [20.0]]  # 1 event, 20 offsets skipped
                rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
                in_file = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
                assert len(rules) == len(in_file) == 15, rules
                assert all(r["health"] == "ok" for r in rules), rules
                firing = {a["labels"]["alertname"] for a in prom.api("alerts")["alerts"] if a["state"] == "firing"}
                assert firing == {"TridentDataLoss"}  # the healthy pipelines raise nothing
                service.terminate()  # the service goes away: the health row says so
                deadline = time.monotonic() + 30
                while finite(prom.query(dict(queries)["Target up"])) != [0.0]:
                    assert time.monotonic() < deadline, prom.query(dict(queries)["Target up"])
                    time.sleep(1)
        finally:
            producer.stop()
            service.terminate()
            POOL.close_all()
