"""``audit`` finds a fault planted in the pipeline's own path, one at a time, on the real Kafka and state.

The pipeline runs through the real coordinator and Spark executor in this process with one fault planted
(:mod:`tests.audit.faults`), and the fault stays planted while the audit runs, as a bug in the code would:
a recount through the pipeline's own reader, pruning or commit would count the same wrong number twice.
The ground truth is the words produced here, never what the pipeline stored.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import app.config
from app.config import compile_pipeline, load
from app.coordinator.coordinator import Coordinator
from app.metrics import Metrics
from tests.audit import faults
from tests.commands.helpers import cli, forget_opened, write_config
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.kafka.helpers import produce

pytestmark = pytest.mark.slow  # Spark in this process

RECORDS = 120
Planted = Callable[[pytest.MonkeyPatch], None]


def _word_count(kafka_peer: KafkaPeer, tmp_path: Path) -> tuple[Path, list[Any]]:
    topic = unique_topic("planted")
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db")},
                        spout={"topics": [topic], "first_poll": "earliest", "discovery_interval_s": 0,
                               "caps": {"per_partition": 20, "per_batch": 30}})
    doc = path.read_text() + "spark:\n  master: local[2]\n  conf:\n    spark.sql.shuffle.partitions: 2\n"
    path.write_text(doc)
    produced = produce(bootstrap, topic, [(i % 2, f"w{i % 7} w{i % 3} common".encode()) for i in range(RECORDS)])
    return path, produced


def _run(path: Path) -> None:
    """The pipeline until idle: the service's coordinator over the service's Spark executor."""
    from prometheus_client import CollectorRegistry

    from app.spark import SparkExecutor, spark_session

    config = load(path)
    compiled = app.config.compile_pipeline(config, "wc")
    spark = spark_session(config.spark.master, app_name="trident-tests")
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, compiled.topology, metrics=metrics)
    assert compiled.topology.spout is not None
    coordinator = Coordinator("wc", compiled.topology.spout, executor, compiled.store(), compiled.coordinator,
                              metrics=metrics)
    try:
        assert coordinator.run_until_idle() > 1
    finally:
        coordinator.close()
        forget_opened()


def _stored(path: Path) -> dict[str, int]:
    import sqlite3

    db = compile_pipeline(load(path), "wc").state.sqlite_path
    assert db is not None
    with sqlite3.connect(db) as conn:
        return {w: int(c) for w, c in conn.execute("SELECT word, count FROM word_counts")}


def _misread(offset: int, copies: int) -> Planted:
    """The pipeline's reader drops (``copies`` 0) or repeats (2) the record at ``offset`` of partition 0."""
    def plant(mp: pytest.MonkeyPatch) -> None:
        original = app.config.compile_pipeline

        def compiled(*args: Any, **kwargs: Any) -> Any:
            c = original(*args, **kwargs)
            c.topology.spout = faults.misreading(c.topology.spout, 0, offset, copies)
            return c

        mp.setattr(app.config, "compile_pipeline", compiled)
    return plant


def _combine_twice(mp: pytest.MonkeyPatch) -> None:
    """The pipeline's commit combines each batch's partial into the stored value twice."""
    import app.spark.batch_executor
    from app.spark.plan import compile_sink as original

    mp.setattr(app.spark.batch_executor, "compile_sink",
               lambda *a, **k: dataclasses.replace(original(*a, **k), aggregator=faults.TwiceCount()))


def _prune_value(mp: pytest.MonkeyPatch) -> None:
    """The pipeline's column pruning leaves out ``value``, the column the sink's words come from."""
    import app.spark.batch_executor
    from app.spark.record_columns import ReadColumns
    from app.spark.record_columns import read_columns as original

    def pruned(*args: Any, **kwargs: Any) -> ReadColumns:
        found = original(*args, **kwargs)
        return ReadColumns(found.named, tuple(c for c in found.named if c != "value"))

    mp.setattr(app.spark.batch_executor, "read_columns", pruned)


DROPPED, REPEATED = 10, 11  # offsets in partition 0 (records 20 and 22: "w6 w2 common", "w1 w1 common")


@pytest.mark.parametrize("fault", ["drops a record", "repeats a record", "combines twice", "prunes value"])
def test_a_fault_planted_in_the_pipeline_is_reported_by_key_exit_5(
        kafka_peer: KafkaPeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    plant: Planted = {"drops a record": _misread(DROPPED, 0), "repeats a record": _misread(REPEATED, 2),
                      "combines twice": _combine_twice, "prunes value": _prune_value}[fault]
    path, produced = _word_count(kafka_peer, tmp_path)
    truth = Counter(w for r in produced for w in r.value.decode().split())
    plant(monkeypatch)
    _run(path)
    stored = _stored(path)
    wrong = {w: (truth[w], stored.get(w)) for w in truth if stored.get(w) != truth[w]}
    assert wrong, "the planted fault left the counts right: it plants nothing"

    r = cli("audit", "--config", str(path), "--pipeline", "wc", "--json")
    assert r.code == 5, r.err + r.out
    report = json.loads(r.out)
    [table] = report["tables"]
    found = {k["key"][0]: (k["expected"], k["stored"]) for k in table["keys"]}
    assert found == wrong  # every wrong key, its true count as the recount's, its stored count; no other key
    assert table["checked"] == len(truth)
    assert report["records"] == RECORDS
    if fault in ("drops a record", "repeats a record"):
        offset = DROPPED if fault == "drops a record" else REPEATED
        [record] = [p for p in produced if (p.partition, p.offset) == (0, offset)]
        changed = Counter(record.value.decode().split())
        sign = -1 if fault == "drops a record" else 1
        assert wrong == {w: (truth[w], truth[w] + sign * n) for w, n in changed.items()}
    if fault == "prunes value":
        assert all(k["outcome"] == "missing" for k in table["keys"])
