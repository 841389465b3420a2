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
from states.asof import AsOf, Known, read_as_of, scan_keys
from states.layout import RowLayout
from states.spec import MapSpec, StateKind
from states.values import OpaqueValue

Key = tuple[Any, ...]


class Outcome(enum.StrEnum):
    EQUAL = "equal"
    DIFFERS = "differs"  # stored and recounted values differ
    MISSING = "missing"  # recounted, not stored as of T
    EXTRA = "extra"  # stored as of T, not recounted
    SKIPPED = "skipped"  # not comparable as of T (moved on since): read again as of a later T


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
        return sum(self.counts[o] for o in (Outcome.DIFFERS, Outcome.MISSING, Outcome.EXTRA))


def sampled(fraction: float) -> Callable[[Key], bool]:
    """A deterministic sample of keys (as stored, see :meth:`RowLayout.key_row`): those whose hash falls under
    ``fraction`` (the same keys every run)."""
    bound = int(fraction * 2**32)
    return lambda key: zlib.crc32(repr(tuple(key)).encode()) < bound


def compare(spec: MapSpec, aggregator: CombinerAggregator, backing: Any, factory: Any, partials: dict[Key, Any], *,
            at: int, since: int = 0, keys: Iterable[Key] | None = None,
            keep: Callable[[Key], bool] | None = None, bases: dict[Key, Any] | None = None) -> SinkAudit:
    """Compare ``partials`` (the recount of txids ``since+1..at``) with ``spec``'s table as of ``at``.

    ``keys``: only these keys (no scan); else every recounted and every stored key that ``keep`` selects (given
    the key as the backend stores it, so a recounted and a stored key are selected alike).
    ``bases``: each key's value as of ``since`` when already known (an earlier round's expected values)."""
    layout = RowLayout(dataclasses.replace(spec, kind=StateKind.OPAQUE))
    norm = {kr: k for kr, k in ((layout.key_row(k), k) for k in partials) if keep is None or keep(kr)}
    recounted = {kr: partials[k] for kr, k in norm.items()}
    if keys is not None:
        wanted = {layout.key_row(k): k for k in keys}
    else:
        wanted = dict(norm)
        for k in scan_keys(factory, spec):
            kr = layout.key_row(k)
            if kr not in wanted and (keep is None or keep(kr)):
                wanted[kr] = k
    order = sorted(wanted, key=repr)
    originals = [wanted[kr] for kr in order]
    now = read_as_of(backing, spec, originals, at)
    if bases is not None:
        known = {layout.key_row(k): v for k, v in bases.items()}
        then = [AsOf(Known.VALUE, known.get(kr)) for kr in order]
    else:
        then = read_as_of(backing, spec, originals, since) if since else [AsOf(Known.VALUE)] * len(order)
    audit = SinkAudit(spec.table)
    for kr, key, stored, base in zip(order, originals, now, then, strict=True):
        audit.add(_one(layout, aggregator, key, recounted.get(kr), kr in recounted, stored, base, since))
    return audit


def _one(layout: RowLayout, aggregator: CombinerAggregator, key: Key, partial: Any, counted: bool, stored: AsOf,
         base: AsOf, since: int) -> KeyResult | None:
    if base.known is Known.MOVED_ON:
        return KeyResult(key, Outcome.SKIPPED, stored_txid=base.stored_txid,
                         reason=f"written by two or more txids after --since txid {since}: its value then is unknown")
    expected = combine_updater(aggregator, partial)(base.value) if counted else base.value
    if stored.known is Known.MOVED_ON:
        return KeyResult(key, Outcome.SKIPPED, expected, stored_txid=stored.stored_txid,
                         reason=f"written by two or more txids since (now txid {stored.stored_txid}): to be read again "
                                "as of a later txid")
    if expected is None and stored.value is None:
        return None
    if stored.value is None:
        return KeyResult(key, Outcome.MISSING, expected, None, stored.stored_txid)
    if expected is None:
        return KeyResult(key, Outcome.EXTRA, None, stored.value, stored.stored_txid)
    if _same(layout, expected, stored.value):
        return None
    return KeyResult(key, Outcome.DIFFERS, expected, stored.value, stored.stored_txid)


def _same(layout: RowLayout, a: Any, b: Any) -> bool:
    """Whether two stored values are the same columns (doubles within a relative 1e-9)."""
    ra, rb = layout.value_row(OpaqueValue(0, a, None)), layout.value_row(OpaqueValue(0, b, None))
    assert ra is not None and rb is not None
    return all(x == y or (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=1e-9))
               for x, y in zip(ra, rb, strict=True))
