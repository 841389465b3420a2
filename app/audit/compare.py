"""Comparing a recount with the stored table as of a txid, key by key.

For a full audit a key's expected value as of ``T`` is its recounted partial (as a commit would
store it for a new key); for ``--since M`` it is the stored value as of ``M`` combined with the
partial of what txids ``M+1..T`` read. Values are compared as the backend stores them (encoded
columns, as compare-and-set does), doubles within a relative 1e-9 (a sum's rounding depends on the
order it was added in). Keys stored but not recounted are found by scanning the table.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from states.aggregators import CombinerAggregator, combine_updater
from states.asof import AsOf, AsOfUnsupportedError, Known, as_of, read_as_of, scan_stored
from states.layout import Row, RowLayout
from states.spec import MapSpec, StateKind
from states.values import OpaqueValue

Key = tuple[Any, ...]


class Outcome(enum.StrEnum):
    EQUAL = "equal"
    DIFFERS = "differs"  # stored and recounted values differ
    MISSING = "missing"  # recounted, not stored as of T
    EXTRA = "extra"  # stored as of T, not recounted
    DUPLICATE = "duplicate"  # stored in two or more rows (shards of a sharded table): which one is read is chance
    SKIPPED = "skipped"  # its value as of T cannot be known (the reason says why)


@dataclass(frozen=True, slots=True)
class KeyResult:
    """One key that is not equal: what the recount expects, what is stored as of T, the txid stored with it."""

    key: Key
    outcome: Outcome
    expected: Any = None
    stored: Any = None
    stored_txid: int | None = None
    reason: str = ""


@dataclass
class SinkAudit:
    """One table's comparison: counts by outcome and every key that is not equal."""

    table: str
    checked: int = 0
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    keys: list[KeyResult] = field(default_factory=list)

    def add(self, result: KeyResult | None) -> None:
        self.checked += 1
        if result is None:
            self.counts[Outcome.EQUAL] += 1
            return
        self.counts[result.outcome] += 1
        self.keys.append(result)

    @property
    def differences(self) -> int:
        return sum(self.counts[o] for o in DIFFERENCES)

    def replace(self, old: KeyResult, new: KeyResult | None) -> None:
        """Put ``new`` (None: equal) in place of ``old``, a result of the same key."""
        self.keys.remove(old)
        self.counts[old.outcome] -= 1
        if new is None:
            self.counts[Outcome.EQUAL] += 1
            return
        self.counts[new.outcome] += 1
        self.keys.append(new)


DIFFERENCES = (Outcome.DIFFERS, Outcome.MISSING, Outcome.EXTRA, Outcome.DUPLICATE)


def sampled(fraction: float) -> Callable[[Key], bool]:
    """A deterministic sample of keys (as stored, see :meth:`RowLayout.key_row`): those whose hash falls under
    ``fraction`` (the same keys every run)."""
    bound = int(fraction * 2**32)
    return lambda key: zlib.crc32(repr(tuple(key)).encode()) < bound


@dataclass
class Snapshot:
    """The stored keys of a table read as of ``at`` (and their base as of ``since``), taken before the recount:
    the sooner the rows are read after ``at`` is chosen, the fewer keys have moved on twice since."""

    spec: MapSpec
    at: int
    since: int
    explicit: bool  # only the keys asked for are compared
    keys: dict[Row, Key] = field(default_factory=dict)
    now: dict[Row, AsOf] = field(default_factory=dict)
    then: dict[Row, AsOf] = field(default_factory=dict)
    stored: dict[Row, Any] = field(default_factory=dict)  # the row as stored when read (value, prev, txid)
    copies: dict[Row, int] = field(default_factory=dict)  # keys the scan met in more than one row, and how often

    @property
    def layout(self) -> RowLayout:
        return RowLayout(dataclasses.replace(self.spec, kind=StateKind.OPAQUE))

    def read(self, backing: Any, wanted: dict[Row, Key], bases: dict[Key, Any] | None = None) -> None:
        """Read ``wanted`` keys (by stored key row) as of ``at`` and as of ``since`` (or take ``bases``)."""
        if not wanted:
            return
        rows, originals = list(wanted), list(wanted.values())
        stored = _multi_get(backing, self.spec, originals)
        now = [as_of(v, self.at, rows_expire=self.spec.ttl_s is not None) for v in stored]
        if bases is not None:
            known = {self.layout.key_row(k): v for k, v in bases.items()}
            then = [AsOf(Known.VALUE, known.get(kr)) for kr in rows]
        elif self.since:
            then = read_as_of(backing, self.spec, originals, self.since)
        else:
            then = [AsOf(Known.VALUE)] * len(rows)
        self.keys.update(wanted)
        self.stored.update(zip(rows, stored, strict=True))
        self.now.update(zip(rows, now, strict=True))
        self.then.update(zip(rows, then, strict=True))


def snapshot(spec: MapSpec, backing: Any, factory: Any, *, at: int, since: int = 0, keys: Iterable[Key] | None = None,
             keep: Callable[[Row], bool] | None = None, bases: dict[Key, Any] | None = None) -> Snapshot:
    """``keys`` (else every stored key that ``keep`` selects, given the key as the backend stores it) as of ``at``.
    ``bases``: each key's value as of ``since`` when already known (an earlier round's expected values)."""
    snap = Snapshot(spec, at, since, keys is not None)
    layout = snap.layout
    if keys is not None:
        snap.read(backing, {layout.key_row(k): k for k in keys}, bases)
        return snap
    expire = spec.ttl_s is not None
    for key, stored in scan_stored(factory, spec):  # one scan, no read per key
        kr = layout.key_row(key)
        if keep is None or keep(kr):
            if kr in snap.keys:
                snap.copies[kr] = snap.copies.get(kr, 1) + 1
            snap.keys[kr] = key
            snap.stored[kr] = stored
            snap.now[kr] = as_of(stored, at, rows_expire=expire)
            snap.then[kr] = as_of(stored, since, rows_expire=expire) if since else AsOf(Known.VALUE)
    return snap


def compare(snap: Snapshot, aggregator: CombinerAggregator, backing: Any, partials: dict[Key, Any], *,
            keep: Callable[[Row], bool] | None = None) -> SinkAudit:
    """Compare ``partials`` (the recount of txids ``since+1..at``) with the table as of ``at``: the keys of the
    snapshot, and (unless it holds only keys asked for) every recounted key ``keep`` selects, read now if the
    snapshot has not got it."""
    layout = snap.layout
    recounted = {kr: v for kr, v in ((layout.key_row(k), v) for k, v in partials.items())
                 if (keep is None or keep(kr)) and (not snap.explicit or kr in snap.keys)}
    originals = {layout.key_row(k): k for k in partials}
    snap.read(backing, {kr: originals[kr] for kr in recounted if kr not in snap.keys})
    audit = SinkAudit(snap.spec.table)
    for kr in sorted(snap.keys, key=repr):
        if kr in snap.copies:
            audit.add(KeyResult(snap.keys[kr], Outcome.DUPLICATE, stored_txid=snap.now[kr].stored_txid,
                                reason=f"stored in {snap.copies[kr]} rows (shards): reads of the key may see any one"))
            continue
        audit.add(_one(layout, aggregator, snap.keys[kr], partial=recounted.get(kr), counted=kr in recounted,
                       stored=snap.now[kr], base=snap.then[kr], since=snap.since))
    return audit


def _one(layout: RowLayout, aggregator: CombinerAggregator, key: Key, *, partial: Any, counted: bool, stored: AsOf,
         base: AsOf, since: int) -> KeyResult | None:
    if base.known is Known.MOVED_ON:
        return KeyResult(key, Outcome.SKIPPED, stored_txid=base.stored_txid,
                         reason=f"written by two or more txids after --since txid {since}: its value then is unknown")
    expected = combine_updater(aggregator, partial)(base.value) if counted else base.value
    if stored.known is Known.MOVED_ON:
        return KeyResult(key, Outcome.SKIPPED, expected, stored_txid=stored.stored_txid,
                         reason=f"written by two or more txids since (now txid {stored.stored_txid}): to be read again "
                                "as of a later txid")
    return against(layout, key, expected, stored)


def against(layout: RowLayout, key: Key, expected: Any, stored: AsOf) -> KeyResult | None:
    """A key's expected value against its stored value as of the txid (None: equal)."""
    if stored.value is None:
        return None if expected is None else KeyResult(key, Outcome.MISSING, expected, None, stored.stored_txid)
    if expected is None:
        return KeyResult(key, Outcome.EXTRA, None, stored.value, stored.stored_txid)
    if _same(layout, expected, stored.value):
        return None
    return KeyResult(key, Outcome.DIFFERS, expected, stored.value, stored.stored_txid)


def _multi_get(backing: Any, spec: MapSpec, keys: list[Key], chunk: int = 5000) -> list[Any]:
    """The stored values of ``keys`` (None: no row), as the backend decodes them."""
    if spec.kind is StateKind.NON_TRANSACTIONAL:
        raise AsOfUnsupportedError(spec.table)
    return [v for i in range(0, len(keys), chunk) for v in backing.multi_get(keys[i:i + chunk])]


def _same(layout: RowLayout, a: Any, b: Any) -> bool:
    """Whether two stored values are the same columns (doubles within a relative 1e-9)."""
    ra, rb = layout.value_row(OpaqueValue(0, a, None)), layout.value_row(OpaqueValue(0, b, None))
    if ra is None or rb is None:  # no columns (never for a value): the same only when neither has any
        return ra is rb
    return all(x == y or (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=1e-9))
               for x, y in zip(ra, rb, strict=True))
