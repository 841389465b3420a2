"""The partition-size watch: which tables it watches, the gauges it sets, and that a standby asks nothing."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.service.partition_watch import PartitionWatch, sharded_tables
from states.cassandra.partition_size import MIB, ShardedTable
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory
from tests.states.test_partition_size import _Client, _Host, _Session


def _client(rows: dict[int, int], mib: int | None) -> Any:
    answer = [] if mib is None else [{"keyspace_name": "ks", "table_name": "words", "mebibytes": mib}]
    return _Client(_Session(rows, {"10.0.0.1": answer}), [_Host("10.0.0.1")])


def test_only_sharded_cassandra_tables_are_watched() -> None:
    """A partition per key has no partition to outgrow; SQLite has no partitions at all."""
    sharded = StateFactory(backend="cassandra", cassandra=CassandraSettings(keyspace="ks", shards=16))
    per_key = StateFactory(backend="cassandra", cassandra=CassandraSettings(keyspace="ks", shards=0))
    sqlite = StateFactory(backend="sqlite", sqlite_path="/tmp/x.db")
    assert sharded_tables([(sharded, "words"), (per_key, "orders"), (sqlite, "clicks")]) == \
        [ShardedTable("ks", "words", 16)]


def test_a_refresh_sets_both_gauges_labelled_by_pipeline_and_table() -> None:
    m = Metrics(CollectorRegistry())
    client = _client({0: 700, 1: 900}, 37)
    watch = PartitionWatch("wc", [ShardedTable("ks", "words", 2)], lambda: client, m)
    watch.refresh()
    assert m.value("trident_state_partition_max_bytes", pipeline="wc", table="ks.words") == 37 * MIB
    assert m.value("trident_state_partition_max_rows", pipeline="wc", table="ks.words") == 700
    watch.refresh()
    assert m.value("trident_state_partition_max_rows", pipeline="wc", table="ks.words") == 900


def test_no_bytes_series_while_no_node_reports_the_table() -> None:
    """Before the first flush the server has no figure: the series is absent, not 0 (an alert must not read 0 as
    small)."""
    m = Metrics(CollectorRegistry())
    PartitionWatch("wc", [ShardedTable("ks", "words", 2)], lambda: _client({0: 5, 1: 5}, None), m).refresh()
    assert m.registry.get_sample_value("trident_state_partition_max_bytes",
                                       {"pipeline": "wc", "table": "ks.words"}) is None
    assert m.value("trident_state_partition_max_rows", pipeline="wc", table="ks.words") == 5


def test_a_standby_asks_nothing_and_a_failed_reading_stops_nothing() -> None:
    """While the process does not hold the lease no query is sent; a reading that fails is tried again later."""
    m = Metrics(CollectorRegistry())
    calls: list[str] = []
    active = threading.Event()

    def client() -> Any:
        calls.append("asked")
        if len(calls) == 1:
            raise OSError("no host available")
        return _client({0: 1, 1: 1}, 1)

    stop = threading.Event()
    watch = PartitionWatch("wc", [ShardedTable("ks", "words", 2)], client, m, active=active.is_set, interval_s=0.01)
    watch.start(stop)
    stop.wait(0.2)
    assert calls == []
    active.set()
    for _ in range(200):
        if m.value("trident_state_partition_max_rows", pipeline="wc", table="ks.words"):
            break
        stop.wait(0.02)
    stop.set()
    assert len(calls) >= 2
    assert m.value("trident_state_partition_max_rows", pipeline="wc", table="ks.words") == 1


def test_the_service_watches_the_sharded_tables_of_each_pipeline(monkeypatch: Any) -> None:
    """A pipeline started by the service gets a watch of its sharded tables, asking only while it is active."""
    from types import SimpleNamespace

    from app.service.process import Service

    started: list[PartitionWatch] = []
    monkeypatch.setattr(PartitionWatch, "start", lambda self, stop: started.append(self))
    settings = CassandraSettings(keyspace="ks", shards=8)
    sharded = StateFactory(backend="cassandra", cassandra=settings)
    sqlite = StateFactory(backend="sqlite", sqlite_path="/tmp/x.db")
    topology = SimpleNamespace(sinks=[(None, SimpleNamespace(factory=sharded, name="words")),
                                      (None, SimpleNamespace(factory=sqlite, name="other"))])
    runner = SimpleNamespace(id="wc", role="standby", compiled=SimpleNamespace(topology=topology, state=sharded))
    plain = SimpleNamespace(id="sql", role="active", compiled=SimpleNamespace(
        topology=SimpleNamespace(sinks=[(None, SimpleNamespace(factory=sqlite, name="other"))]), state=sqlite))
    service = Service.__new__(Service)
    service.stop, service.metrics = threading.Event(), Metrics(CollectorRegistry())
    for r in (runner, plain):
        service._watch_partitions(r)  # type: ignore[arg-type]
    assert [(w.pipeline, [c.table for c in w.counts]) for w in started] == [("wc", [ShardedTable("ks", "words", 8)])]
    assert not started[0].active()
    runner.role = "active"
    assert started[0].active()
