"""Latest-value upserts in a topology: record places carried to ``latest``/``first``, tombstones.

A ``Latest``/``First`` aggregate needs each row's record place ``(timestamp, partition, offset)``
after the user's transforms, which may have selected other columns. The place is carried
implicitly: :func:`upsert_transforms` adds a hidden column :data:`PLACE_COLUMN` (and, when
tombstones delete, :data:`TOMBSTONE_COLUMN`: the record's value was null) before the first
transform and appends both to every ``map`` (``select``) step. A Python function transform must
keep them (the Spark compiler refuses a sink whose rows lost them).

Tombstones (records with a null value): ``ignore`` filters them out before the transforms;
``delete`` lets them through the transforms (so the key can still be computed from the record's
key; a filter that drops null values drops tombstones too) and stores the stamped boolean
``deleted`` beside the sink's ``latest`` values: a key whose newest record is a tombstone reads
as absent, yet its row and txid stay, so a replay of the txid is recognised like any other update.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from app.topology.steps import Agg, Transform
from states.aggregators import STAMPED, Latest
from states.spec import DELETED_COLUMN

TOMBSTONE_POLICIES = ("delete", "ignore")
PLACE_COLUMN = "_place"  # struct<timestamp: bigint ms, partition: bigint, offset: bigint>; "_": no user name
TOMBSTONE_COLUMN = "_tombstone"  # boolean: the record's value was null
PLACE_SQL = ("named_struct('timestamp', coalesce(unix_millis(`timestamp`), -1), "
             "'partition', CAST(`partition` AS BIGINT), 'offset', `offset`)")


class UpsertSink(Protocol):
    """What the upsert rules read of a sink (:class:`app.topology.topology.PersistentAggregate`)."""

    @property
    def name(self) -> str: ...

    @property
    def aggregates(self) -> tuple[Agg, ...]: ...

    @property
    def tombstones(self) -> str | None: ...

    @property
    def ttl_s(self) -> int | None: ...


def is_stamped(agg: Agg) -> bool:
    """Whether ``agg`` keeps a record's value with its place (``latest``/``first``)."""
    return isinstance(agg.aggregator, STAMPED)


_LATEST = Latest().name


def tombstone_problems(tombstones: str | None, aggregates: Sequence[tuple[str, str]]) -> Iterator[tuple[int, str]]:
    """What keeps ``tombstones: delete`` from working over ``aggregates`` (``(function, output)`` pairs): the
    index of each aggregate at fault and why. The one rule, for the config file and for code-built topologies."""
    if tombstones != "delete":
        return
    for i, (function, output) in enumerate(aggregates):
        if function != _LATEST:
            yield i, (f"tombstones: delete needs every aggregate to be latest (a deleted key forgets its values; "
                      f"{function}() AS {output} cannot be rebuilt after a delete)")
        elif output == DELETED_COLUMN:
            yield i, (f"tombstones: delete keeps the tombstone flag in the column {DELETED_COLUMN!r}; name the "
                      "aggregate otherwise (as: ...)")


def check_sink(sink: UpsertSink) -> None:
    """Refuse a sink whose upsert settings cannot work, saying why (ValueError)."""
    where = f"table {sink.name!r}"
    if sink.tombstones is not None and sink.tombstones not in TOMBSTONE_POLICIES:
        msg = (
            f"{where}: tombstones must be one of {', '.join(TOMBSTONE_POLICIES)} (or None: a null "
            f"value is aggregated like any record), got {sink.tombstones!r}"
        )
        raise ValueError(msg)
    for a in sink.aggregates:
        if is_stamped(a) and a.input is None:
            msg = f"{where}: {a.aggregator.name}() needs an input column"
            raise ValueError(msg)
    for _, problem in tombstone_problems(sink.tombstones, [(a.aggregator.name, a.output) for a in sink.aggregates]):
        msg = f"{where}: {problem}"
        raise ValueError(msg)
    if sink.ttl_s is not None and (isinstance(sink.ttl_s, bool) or not isinstance(sink.ttl_s, int) or sink.ttl_s < 1):
        msg = f"{where}: ttl_s must be a whole number of seconds >= 1, got {sink.ttl_s!r}"
        raise ValueError(msg)


def stored_aggregates(sink: UpsertSink) -> tuple[Agg, ...]:
    """The sink's aggregates, then ``latest(_tombstone) AS deleted`` when tombstones delete."""
    if sink.tombstones != "delete":
        return sink.aggregates
    return (*sink.aggregates, Agg(Latest(), DELETED_COLUMN, TOMBSTONE_COLUMN))


def hidden_columns(sink: UpsertSink) -> tuple[str, ...]:
    """The hidden columns the sink's rows must carry to its aggregation."""
    if not any(is_stamped(a) for a in stored_aggregates(sink)):
        return ()
    return (PLACE_COLUMN, TOMBSTONE_COLUMN) if sink.tombstones == "delete" else (PLACE_COLUMN,)


def upsert_transforms(transforms: tuple[Transform, ...], sink: UpsertSink) -> tuple[Transform, ...]:
    """``transforms`` with the tombstone filter, and the hidden columns added first and kept by every select."""
    out: list[Transform] = []
    if sink.tombstones == "ignore":
        out.append(Transform("filter", ("`value` IS NOT NULL",)))
    hidden = hidden_columns(sink)
    if hidden:
        exprs = {PLACE_COLUMN: f"{PLACE_SQL} AS {PLACE_COLUMN}", TOMBSTONE_COLUMN: f"`value` IS NULL AS {TOMBSTONE_COLUMN}"}
        out.append(Transform("with", tuple(exprs[h] for h in hidden)))
    for t in transforms:
        widened = t.kind == "select" and bool(hidden) and not any(_is_star(e) for e in t.exprs)
        out.append(Transform("select", (*t.exprs, *hidden)) if widened else t)
    return tuple(out)


def _is_star(expr: str) -> bool:
    e = expr.strip()
    return e == "*" or e.endswith(".*")
