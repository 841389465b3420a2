"""Sharded tables: many keys per Cassandra partition, so one conditional batch writes many keys.

With ``shards: N`` (N > 0) a state table is keyed ``PRIMARY KEY ((shard), <key columns>)``: each key
lives in partition ``shard_of(key) = crc32(key) % N``. A lightweight transaction's Paxos round costs
the server about as much for a batch of rows in one partition as for one row, so a commit sends one
conditional batch per shard instead of one LWT per key (:mod:`states.cassandra.batches`).

The shard is a pure function of the key's values, fixed when the table is created (a table's shard
count is part of its schema: another count is a schema mismatch). On Cassandra 5.0 a key is read in cqlsh
as in any table, ``SELECT * FROM ks.t WHERE word = 'x'``, through the index made with the table
(:mod:`states.cassandra.key_index`); on 4.x with every shard listed:
``SELECT * FROM ks.t WHERE shard IN (0, 1, ..., N-1) AND word = 'x'``.
"""

from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any

SHARD_COLUMN = "shard"
SEPARATOR = "\x1f"  # between a composite key's columns
SHARD_TYPE = "int"
#: The shards a new state table gets when ``cassandra.shards`` is unset (an existing table keeps its own).
DEFAULT_SHARDS = 16
MAX_SHARDS = 4096  # a txid's keys spread over at most this many batches; more shards would batch little


def check_shards(shards: int) -> int:
    """``shards`` if it is a valid shard count (0: a partition per key), else ValueError."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 0 <= shards <= MAX_SHARDS:
        msg = f"shards must be an integer from 0 (a partition per key) to {MAX_SHARDS}, not {shards!r}"
        raise ValueError(msg)
    return shards


def shard_of(key_row: tuple[Any, ...], shards: int) -> int:
    """The shard of a key row (its columns' values as the table stores them): stable across processes and
    Python versions (CRC-32 of a fixed encoding, never Python's salted ``hash``)."""
    return zlib.crc32(SEPARATOR.encode().join(_encode(v) for v in key_row)) % shards


def sharded(key_row: tuple[Any, ...], shards: int) -> tuple[Any, ...]:
    """The primary key's values of a key row: its shard first when the table is sharded (``shards`` > 0)."""
    return (shard_of(key_row, shards), *key_row) if shards else key_row


def _encode(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, datetime):
        return value.isoformat().encode()
    if isinstance(value, float):
        return repr(value).encode()
    return str(value).encode("utf-8", "surrogatepass")
