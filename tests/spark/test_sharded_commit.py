"""A sharded Cassandra table committed from Spark tasks: each shard from one task, one batch per shard per txid."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.spark.sharding import by_shard
from app.spark.tasks import COMMIT_PARTITION_COLUMN
from states.cassandra import CassandraSettings
from states.cassandra.shards import shard_of
from states.spec import Column, MapSpec, StateKind
from tests.bench.spark_commit import StableKeys

SHARDS = 3


@pytest.mark.parametrize(("types", "rows"), [
    (("text",), [("the",), ("",), ("ü€",), ("a\x1fb",)]),
    (("bigint",), [(0,), (-7,), (2**62,)]),
    (("text", "int", "boolean"), [("cat", 1, True), ("cat", -1, False), ("", 0, True)]),
])
def test_spark_puts_a_key_in_the_shard_the_table_does(spark: Any, types: tuple[str, ...],
                                                     rows: list[tuple[Any, ...]]) -> None:
    """The shard Spark computes for a result row is :func:`shard_of` of its key, and each shard's rows are in
    one Spark partition."""
    names = [f"k{i}" for i in range(len(types))]
    spec = MapSpec("t", StateKind.OPAQUE, tuple(Column(n, t) for n, t in zip(names, types, strict=True)),
                   (Column("count", "bigint"),))
    shards = 7
    ddl = ", ".join(f"{n} {'string' if t == 'text' else t}" for n, t in zip(names, types, strict=True))
    frame = spark.createDataFrame(rows * 5, ddl).withColumn(COMMIT_PARTITION_COLUMN, spark_partition_id())
    got = by_shard(frame, spec, shards, shards).withColumn("_task", spark_partition_id()).collect()
    assert {tuple(r[n] for n in names): r[COMMIT_PARTITION_COLUMN] for r in got} == {
        row: shard_of(row, shards) for row in rows}
    tasks: dict[int, set[int]] = {}
    for r in got:
        tasks.setdefault(r[COMMIT_PARTITION_COLUMN], set()).add(r["_task"])
    assert all(len(t) == 1 for t in tasks.values())


def spark_partition_id() -> Any:
    from pyspark.sql import functions as sf

    return sf.spark_partition_id()


def test_commit_tasks_send_one_batch_per_shard(spark: Any, spark_kafka: Any, cql_server_session: Any) -> None:
    """4 commit tasks per txid over a table of 3 shards: each shard's keys commit from one task, so a txid of 200
    keys is 3 conditional batches (without the regrouping, every task sends its own batch to each shard); the
    counts equal what was produced."""
    server = cql_server_session
    base = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_sharded",
                             local_dc=server.data_center, protocol_version=max(server.protocol_versions))
    keys = StableKeys(spark_kafka, replace(base, shards=SHARDS), keys=200)
    keys.produce(3)
    server.reset_counts()
    rounds = keys.run(spark, 3, commit_partitions=4, driver_keys=0)
    assert [r.keys for r in rounds] == [200] * 3
    assert server.stats().ops(keys.table, "cas") == 3 * SHARDS
    assert [r.lwts for r in rounds] == [SHARDS] * 3  # what the executors counted agrees
    assert [r.reads for r in rounds[1:]] == [0, 0]  # each task meets its shards' cache again
    rows = server.rows(base.keyspace, keys.table)
    assert {r["word"]: r["count"] for r in rows} == {f"k{i}": 3 for i in range(200)}
    assert all(r["shard"] == shard_of((r["word"],), SHARDS) for r in rows)
