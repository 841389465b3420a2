"""Cassandra backends: typed tables people query with CQL, every write a lightweight transaction.

``OpaqueMap(CasCachedMap(CassandraBackingMap(settings, spec)))`` is the production stack; the
transactional-state store and coordinator lease live in one partition per topology. Modules:
``settings`` (typed settings), ``session`` (one cluster/session per process, prepared statements,
the request loop), ``window`` (bounded windows of async requests), ``pipe`` (a commit's
reads and LWTs key by key through one window), ``shards`` (sharded tables: many keys per
partition), ``batches`` (a sharded table's compare-and-sets, one conditional batch per shard), ``retry`` (what to do after a failed request: retry, resolve or raise),
``schema`` (create or validate tables; rows are laid out by ``states.layout``, shared with SQLite),
``unknown`` (resolving compare-and-sets of unknown outcome), ``refusals`` (the driver's refusals, by type),
``backing_map``, ``txstate``.
Attributes are imported lazily, so importing the package does not load the driver.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CassandraBackingMap": "states.cassandra.backing_map",
    "CassandraTransactionalStateStore": "states.cassandra.txstate",
    "CassandraSettings": "states.cassandra.settings",
    "TlsSettings": "states.cassandra.settings",
    "CassandraClient": "states.cassandra.session",
    "shared_client": "states.cassandra.session",
}

__all__ = ["CassandraBackingMap", "CassandraClient", "CassandraSettings",
           "CassandraTransactionalStateStore", "TlsSettings", "shared_client"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        msg = f"module 'states.cassandra' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(_EXPORTS[name]), name)
