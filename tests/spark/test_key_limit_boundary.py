"""The Spark expression that finds keys a state refuses agrees with :meth:`KeyLimits.problem` at the bound.

The process job decides a key is too long in Spark (``app.spark.bad_record_finding``), the commit would be refused
by the database by its own rule: the two must draw the line at the same byte, for one-column and composite
keys, for multi-byte characters (bytes count, not characters) and for blobs.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.spark.bad_record_finding import null_key_records, split_null_keys
from states.cassandra.limits import FIXED, MAX_KEY_BYTES
from states.limits import KeyLimits

pytestmark = pytest.mark.slow

ONE_TEXT = KeyLimits("t", (("word", "text"),), MAX_KEY_BYTES, non_empty=("word",), fixed=FIXED)
COMPOSITE = KeyLimits("t", (("word", "text"), ("n", "bigint")), MAX_KEY_BYTES, overhead=3, fixed=FIXED)


def _reasons(spark: Any, limits: KeyLimits, keys: list[tuple[Any, ...]]) -> dict[int, str]:
    """Per row index, the reason the Spark expression gives for refusing its key (absent: kept)."""
    from pyspark.sql import functions as F

    names = [n for n, _ in limits.columns]
    rows = [(*k, i) for i, k in enumerate(keys)]
    df = spark.createDataFrame(rows, [*names, "i"]).withColumn(
        "source", F.struct(F.lit("topic").alias("topic"), F.lit(0).alias("partition"), F.col("i").alias("offset")))
    kept, name = split_null_keys(df, names, "sink", "source", limits)
    kept_rows = {r["i"] for r in kept.collect()}
    refused = {bad.offset: bad.reason for bad in null_key_records(kept, name, names, "sink", limits)}
    assert not kept_rows & refused.keys()
    assert kept_rows | refused.keys() == set(range(len(keys)))
    return refused


def _expected(limits: KeyLimits, keys: list[tuple[Any, ...]]) -> dict[int, str]:
    return {i: p.value for i, k in enumerate(keys) if (p := limits.problem(k)) is not None}


def test_one_column_text_key_at_the_bound(spark: Any) -> None:
    keys = [("a" * (MAX_KEY_BYTES - 1),), ("a" * MAX_KEY_BYTES,), ("a" * (MAX_KEY_BYTES + 1),),
            ("é" * (MAX_KEY_BYTES // 2),),  # 65534 bytes in 32767 characters: kept
            ("é" * (MAX_KEY_BYTES // 2 + 1),),  # 65536 bytes in 32768 characters: refused
            ("",), ("x",)]
    got = _reasons(spark, ONE_TEXT, keys)
    assert got == _expected(ONE_TEXT, keys)
    assert got == {2: "KEY_TOO_LONG", 4: "KEY_TOO_LONG", 5: "EMPTY_KEY"}


def test_composite_key_counts_lengths_and_fixed_sizes(spark: Any) -> None:
    # text bytes + 3 + 8 (bigint) + 3 <= 65535: the longest text kept is 65521 bytes
    longest = MAX_KEY_BYTES - 3 - 8 - 3
    keys = [("a" * longest, 1), ("a" * (longest + 1), 1), ("", 7), ("é" * (longest // 2), 2),
            ("é" * (longest // 2 + 1), 2)]
    got = _reasons(spark, COMPOSITE, keys)
    assert got == _expected(COMPOSITE, keys)
    assert got == {1: "KEY_TOO_LONG", 4: "KEY_TOO_LONG"}  # an empty component is allowed in a composite key
