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
    keys = StableKeys(spark_kafka, server, settings, keys=200)
    rounds = 5
    keys.produce(rounds)
    done = keys.run(spark, rounds, chunk_size=50, commit_partitions=4)
    assert [r.keys for r in done] == [200] * rounds
    assert done[0].reads == 0 and done[0].lwts == 200  # new keys: one INSERT IF NOT EXISTS each
    steady = done[1:]
    assert sum(r.reads + r.serial_reads for r in steady) == 0
    assert sum(r.lwts for r in steady) == 200 * len(steady)  # no stale cache entry anywhere
    assert keys.stored() == {f"k{i}": rounds for i in range(200)}
