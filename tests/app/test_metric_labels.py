"""Every metric carries the pipeline: two pipelines on one registry can be told apart, from the first event."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

from app.metrics import Metrics
from spouts.kafka import KafkaSpout
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.metadata import Partition
from spouts.metrics import SpoutMetrics
from states.factory import StateFactory
from states.spec import Column, MapSpec, StateKind
from tests.kafka.helpers import config, produce, spread


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_state_metrics_of_two_pipelines_are_told_apart(tmp_path: Path) -> None:
    spec = MapSpec("counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("n", "bigint"),))
    for pipeline, txid in (("left-9", 1), ("right-9", 1)):
        factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / f"{pipeline}.db"), pipeline=pipeline)
        state = factory.make_state(spec)
        state.begin_commit(txid)
        state.multi_update([("a",)], [lambda v: 1])
        state.commit(txid)
    for pipeline in ("left-9", "right-9"):
        assert (sample("trident_state_requests_total", pipeline=pipeline, backend="sqlite", kind="cas") or 0) > 0
        # the alerting series exist at 0 before the first event, so increase() sees it
        assert sample("trident_cas_unknown_outcomes_total", pipeline=pipeline, resolution="applied") == 0
        assert sample("trident_cas_conflicts_total", pipeline=pipeline) == 0


def test_the_service_metrics_expose_the_labelled_families() -> None:
    m = Metrics(CollectorRegistry())
    bound = m.states.bound("p")
    bound.state_requests.labels(backend="memory", kind="read").inc()
    bound.cas_conflicts.inc(2)
    assert m.value("trident_state_requests_total", pipeline="p", backend="memory", kind="read") == 1
    assert m.value("trident_cas_conflicts_total", pipeline="p") == 2
    m.cas_conflicts.labels(pipeline="p").inc()  # what the driver does with executors' deltas
    assert bound.value("trident_cas_conflicts_total") == 3


def test_data_loss_series_carry_the_pipeline_and_exist_from_the_first_plan() -> None:
    with MockKafkaCluster(1) as cluster:
        cluster.create_topic("orders", 1, 1)
        produce(cluster.bootstrap_servers(), "orders", spread(3, 1))
        metrics = SpoutMetrics(CollectorRegistry())
        em = KafkaSpout(config(cluster.bootstrap_servers(), topics=["orders"]), "orders-9", metrics).emitter()
        em.plan_partition(Partition("orders", 0), None, 10)
        labels = {"pipeline": "orders-9", "topic": "orders", "partition": "0"}
        assert metrics.registry.get_sample_value("trident_data_loss_events_total", {**labels, "policy": "fail"}) == 0
        assert metrics.registry.get_sample_value("trident_data_loss_offsets_total", labels) == 0
        from spouts.kafka import POOL

        POOL.close_all(cluster.bootstrap_servers())
