"""Inside Spark a key meets the same cache every txid: a stable key set costs one LWT per key per txid."""

from __future__ import annotations

from typing import Any

from states.cassandra import CassandraSettings
from tests.bench.spark_commit import StableKeys


def test_a_stable_key_set_costs_one_lwt_per_key_whichever_worker_commits(spark: Any, spark_kafka: Any,
                                                                       cql_server_session: Any) -> None:
    """4 commit tasks per txid on 2 reused Python workers: after the first txid, no reads and no failed LWTs."""
    server = cql_server_session
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_commit_cache",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions))
    keys = StableKeys(spark_kafka, settings, keys=200)
    keys.produce(5)
    server.reset_counts()
    first = keys.run(spark, 1, commit_partitions=4)
    assert server.stats().ops(keys.table, "cas") == 200  # new keys (each task's fresh cache reads a sample first)
    server.reset_counts()
    steady = keys.run(spark, 4, commit_partitions=4)  # the same pipeline, resumed
    assert [r.keys for r in first + steady] == [200] * 5
    assert (server.stats().ops(keys.table, "read"), server.stats().ops(keys.table, "serial_read")) == (0, 0)
    assert server.stats().ops(keys.table, "cas") == 4 * 200  # no stale cache entry anywhere
    assert [(r.reads, r.lwts) for r in steady] == [(0, 200)] * 4  # what the executors counted agrees
    stored = {r["word"]: r["count"] for r in server.rows(settings.keyspace, keys.table)}
    assert stored == {f"k{i}": 5 for i in range(200)}
