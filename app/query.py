"""Reading a sink's current values on the driver: Trident's ``stateQuery`` with ``MapGet``.

    query(counts, [("the",), ("fox",)])   # -> [12, 3]  (None for a key never written)
    query(total)                           # a global aggregate -> its value

Values are what readers see: an opaque state's ``curr``, a transactional state's value (a
``latest``/``first`` column's value without its record place; None for a key a tombstone deleted). The
table's spec (typed key and value columns) comes from, in order: ``spec=``; the SparkExecutor that
compiled the sink in this process; the stored table itself (its backend's :mod:`states.reader`). The
state is opened through the sink's factory, once per process, like every other state. The command
line's ``query`` (:mod:`app.commands.query`) reads whole rows and the top N through the same readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.spark.plan import registered_spec
from app.topology.topology import PartitionPersist, PersistentAggregate
from app.topology.upserts import is_stamped
from states.reader import visible_value
from states.snapshottable import GLOBAL_KEY, GLOBAL_KEY_COLUMN
from states.spec import Column, MapSpec

Sink = PersistentAggregate | PartitionPersist


def query(sink: Sink, keys: Sequence[Any] | None = None, *, spec: MapSpec | None = None) -> Any:
    """Current values of ``keys`` (tuples in key-column order; a bare value for a one-column key).

    A global aggregate (no group-by) takes no keys and returns its single value.
    """
    spec = spec or registered_spec(sink) or stored_spec(sink)
    state = sink.factory.make_state(spec, create=False)  # a reader never creates a table (nor again a lost one)
    if isinstance(sink, PersistentAggregate) and sink.is_global:
        if keys is not None:
            msg = f"sink {sink.name!r} is a global aggregate: query it without keys"
            raise ValueError(msg)
        return visible_value(spec, state.multi_get([GLOBAL_KEY])[0])
    if keys is None:
        msg = f"sink {sink.name!r} is keyed: give the keys to read"
        raise ValueError(msg)
    width = len(spec.key)
    wanted = [k if isinstance(k, tuple) else (k,) for k in keys]
    for k in wanted:
        if len(k) != width:
            msg = f"key {k!r} of sink {sink.name!r} needs {width} field(s): {[c.name for c in spec.key]}"
            raise ValueError(msg)
    return [visible_value(spec, v) for v in state.multi_get(wanted)]


def stored_spec(sink: Sink) -> MapSpec:
    """The spec of ``sink``'s existing table: column names and order from the sink, types from the database.

    (Cassandra keeps no order of regular columns, so the order of a tuple value comes from the sink.)
    """
    f = sink.factory
    if f.backend not in ("sqlite", "cassandra"):
        msg = f"sink {sink.name!r}: no spec compiled in this process; pass spec="
        raise LookupError(msg)
    types = f.reader().column_types(sink.name)
    if not types:
        msg = f"sink {sink.name!r}: table {sink.name!r} does not exist yet (nothing committed)"
        raise LookupError(msg)
    stamped: set[str] = set()
    if isinstance(sink, PersistentAggregate):
        keys, values = sink.group_by or (GLOBAL_KEY_COLUMN,), tuple(a.output for a in sink.stored_aggregates)
        stamped = {a.output for a in sink.stored_aggregates if is_stamped(a)}
    else:
        keys, values = sink.key_columns, sink.value_columns
    missing = [n for n in (*keys, *values) if n not in types]
    if missing:
        msg = f"table {sink.name!r} has no column(s) {missing} of sink {sink.name!r}"
        raise LookupError(msg)
    value_columns = tuple(Column(n, types[n], n in stamped) for n in values)
    if isinstance(sink, PartitionPersist):
        return MapSpec(sink.name, f.kind, tuple(Column(n, types[n]) for n in keys), value_columns)
    return MapSpec(sink.name, f.kind, tuple(Column(n, types[n]) for n in keys), value_columns,
                   sink.tombstones == "delete", sink.ttl_s)


__all__ = ["GLOBAL_KEY_COLUMN", "query", "stored_spec"]
