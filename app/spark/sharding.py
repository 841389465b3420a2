"""A sharded table's result rows regrouped so that each shard commits from one task (``states.cassandra.shards``).

Two conditional batches on one partition at once contend (Paxos rounds on one partition are serial),
so the commit tasks of a sharded sink must not share a shard. The shard is computed here by Spark
itself (CRC-32 of the key's columns as strings, joined by the same separator), equal to
:func:`~states.cassandra.shards.shard_of` for text, integer and boolean keys; for a key of another type
(a double, a timestamp, a blob) Spark's string may differ from the table's encoding, and a shard's keys
may then commit from two tasks: correct (every batch is conditional), only slower.
"""

from __future__ import annotations

from typing import Any

from app.spark.tasks import COMMIT_PARTITION_COLUMN
from states.spec import MapSpec


def by_shard(frame: Any, spec: MapSpec, shards: int, partitions: int) -> Any:
    """``frame``'s rows in ``partitions`` partitions, each shard's rows in one. A row's commit partition (which
    picks its cache file) becomes its shard's, so each file is written by one task, the same every txid."""
    from pyspark.sql import functions as sf

    from states.cassandra.shards import SEPARATOR

    text = sf.concat_ws(SEPARATOR, *(sf.col(c.name).cast("string") for c in spec.key))
    shard = sf.pmod(sf.crc32(text.cast("binary")), sf.lit(shards))
    return (frame.withColumn(COMMIT_PARTITION_COLUMN, sf.pmod(shard, sf.lit(partitions)).cast("int"))
            .repartition(partitions, COMMIT_PARTITION_COLUMN))
