"""Inside Spark a key meets the same cache every txid: a stable key set costs one LWT per key per txid."""

from __future__ import annotations

from typing import Any

from app.spark.plan import commit_partition
from states.cassandra import CassandraSettings
from tests.bench.spark_commit import StableKeys


def test_a_stable_key_set_costs_one_lwt_per_key_whichever_worker_commits(spark: Any, spark_kafka: Any,
                                                                       cql_server_session: Any) -> None:
    """4 commit tasks per txid on 2 reused Python workers: after the first txid, no reads and no failed LWTs."""
    server = cql_server_session
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_commit_cache",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 shards=0)  # LWTs per key: the layout of one LWT per key
    keys = StableKeys(spark_kafka, settings, keys=200)
    keys.produce(5)
    server.reset_counts()
    first = keys.run(spark, 1, commit_partitions=4, driver_keys=0)
    assert server.stats().ops(keys.table, "cas") == 200  # new keys (each task's fresh cache reads a sample first)
    server.reset_counts()
    steady = keys.run(spark, 4, commit_partitions=4, driver_keys=0)  # the same pipeline, resumed
    assert [r.keys for r in first + steady] == [200] * 5
    assert (server.stats().ops(keys.table, "read"), server.stats().ops(keys.table, "serial_read")) == (0, 0)
    assert server.stats().ops(keys.table, "cas") == 4 * 200  # no stale cache entry anywhere
    assert [(r.reads, r.lwts) for r in steady] == [(0, 200)] * 4  # what the executors counted agrees
    stored = {r["word"]: r["count"] for r in server.rows(settings.keyspace, keys.table)}
    assert stored == {f"k{i}": 5 for i in range(200)}


def test_a_key_meets_its_cache_whether_the_txid_is_read_as_one_partition_or_several(
        spark: Any, spark_kafka: Any, cql_server_session: Any) -> None:
    """A txid of one range is one Spark partition end to end (no shuffle by key): its one commit task
    still uses each key's own partition cache, so txids alternating between one range and several
    cost one LWT per key and no read once the keys are known."""
    server = cql_server_session
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_commit_cache",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 shards=0)  # LWTs per key: the layout of one LWT per key
    keys = StableKeys(spark_kafka, settings, keys=200, per_partition=200)
    rounds = []
    for partition in (None, 0, None, 2, None):  # spread, one range, spread, one range, spread
        keys.produce(1, partition)
        server.reset_counts()
        rounds += keys.run(spark, 1, commit_partitions=4, driver_keys=0)
        if len(rounds) > 1:
            ops = [server.stats().ops(keys.table, kind) for kind in ("read", "serial_read", "cas")]
            assert ops == [0, 0, 200], (len(rounds), ops)  # every key's cache entry was where it looked
    assert [(r.keys, r.reads, r.lwts) for r in rounds[1:]] == [(200, 0, 200)] * 4
    stored = {r["word"]: r["count"] for r in server.rows(settings.keyspace, keys.table)}
    assert stored == {f"k{i}": 5 for i in range(200)}


def test_the_commit_partition_of_a_row_is_where_a_shuffle_by_its_keys_sends_it(spark: Any) -> None:
    """So a txid read as several partitions commits one cache file per task."""
    from pyspark.sql import functions as sf

    rows = [(f"k{i}", i % 7) for i in range(2000)]
    shuffled = spark.createDataFrame(rows, "word string, n bigint").repartition(5, "word", "n")
    check = shuffled.select((sf.spark_partition_id() == commit_partition(("word", "n"), 5)).alias("same"))
    assert {r["same"] for r in check.collect()} == {True}


def test_a_cache_file_older_than_its_partition_s_last_commit_is_cold_not_a_failed_lwt_per_key(
        spark: Any, spark_kafka: Any, cql_server_session: Any) -> None:
    """As on a cluster, where a commit partition moves to an executor whose own file is older: txids 1-2
    commit in 4 partitions (their files saved after txid 2), txid 3 in 2 partitions (other files: the
    4-partition files miss it), txid 4 in 4 partitions again. Its files are older than the keys' last
    commit: read once (batched), one LWT per key, none failed."""
    server = cql_server_session
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_commit_cache",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 shards=0)  # LWTs per key: the layout of one LWT per key
    keys = StableKeys(spark_kafka, settings, keys=200)
    keys.produce(4)
    keys.run(spark, 2, commit_partitions=4, driver_keys=0)
    keys.run(spark, 1, commit_partitions=2, driver_keys=0)
    server.reset_counts()
    moved = keys.run(spark, 1, commit_partitions=4, driver_keys=0)
    assert [r.keys for r in moved] == [200]
    assert server.stats().ops(keys.table, "cas") == 200  # no LWT failed on a stale entry
    assert server.stats().ops(keys.table, "read") <= 240  # at most 1.2 reads per key
    stored = {r["word"]: r["count"] for r in server.rows(settings.keyspace, keys.table)}
    assert stored == {f"k{i}": 4 for i in range(200)}


def test_on_the_driver_a_stable_key_set_costs_one_lwt_per_key_and_a_switch_of_path_reads_once(
        spark: Any, spark_kafka: Any, cql_server_session: Any) -> None:
    """Results below the threshold are committed on the driver, which keeps the sink's cache between its
    commits: once warm, no read and one LWT per key. One executor switching to commit tasks and back: each
    path finds its own cache older than the sink's last commit (the other path's), so it reads its keys
    once instead of trusting stale values: no LWT ever fails (a stale entry costs a failed LWT and a
    serial read), and the counts are exact."""
    server = cql_server_session
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_commit_cache",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 shards=0)  # LWTs per key: the layout of one LWT per key
    keys = StableKeys(spark_kafka, settings, keys=200)
    keys.produce(6)
    server.reset_counts()
    paths = [2_000, 2_000, 0, 0, 2_000, 2_000]  # driver, driver, tasks, tasks, driver, driver
    rounds = keys.run(spark, 6, commit_partitions=4, driver_keys_by_round=paths)
    assert server.stats().ops(keys.table, "cas") == 6 * 200
    assert server.stats().ops(keys.table, "serial_read") == 0
    assert [(r.keys, r.lwts, r.serial_reads) for r in rounds] == [(200, 200, 0)] * 6
    assert [r.reads > 0 for r in rounds] == [True, False, True, False, True, False]  # cold after each switch
    stored = {r["word"]: r["count"] for r in server.rows(settings.keyspace, keys.table)}
    assert stored == {f"k{i}": 6 for i in range(200)}
