"""A key's stored value as of a committed txid, read while the pipeline keeps writing.

An opaque value ``(txid, curr, prev)`` knows two points of its key's history: ``curr`` is the value
after batch ``txid``, ``prev`` the value before it. So as of a committed txid ``T`` its value is
``curr`` when ``txid <= T`` (nothing wrote it since), ``prev`` when ``txid == T + 1`` (one batch
wrote it since), and unknown when ``txid > T + 1``: the key moved on twice, and it must be read
again as of a later ``T``, unless ``prev`` is None: the key had no value before ``txid``, so
none as of any earlier ``T`` either (rows are never deleted; a table with a TTL is the exception,
where an expired row may have existed). A transactional value ``(txid, val)`` has no ``prev``: it is known only
when ``txid <= T``. A non-transactional value carries no txid at all and cannot be read as of anything.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from states.protocols import CasBackingMap
from states.spec import MapSpec, StateKind
from states.values import OpaqueValue, TransactionalValue


class AsOfUnsupportedError(ValueError):
    """A state whose values carry no txid (non-transactional): nothing can be read as of a txid."""

    def __init__(self, table: str) -> None:
        super().__init__(f"table {table}: a non-transactional state keeps no txid per key, so no value can be read "
                         "as of a txid")
        self.table = table


class Known(enum.Enum):
    """Whether a key's value as of ``T`` is known: its value (maybe absent), or moved on since."""

    VALUE = "value"  # ``value`` is the key's value as of T (None: the key did not exist then)
    MOVED_ON = "moved_on"  # written by two or more txids after T: read it again as of a later T


@dataclass(frozen=True, slots=True)
class AsOf:
    """One key as of a committed txid: ``value`` when ``known`` is VALUE; ``stored_txid`` is the txid stored
    with the key now (None: no row)."""

    known: Known
    value: Any = None
    stored_txid: int | None = None


def as_of(stored: Any, txid: int, *, rows_expire: bool = False) -> AsOf:
    """The value of a stored ``OpaqueValue`` or ``TransactionalValue`` (None: no row) as of committed ``txid``.
    ``rows_expire``: the table has a TTL (a row created after ``txid`` may have had an expired one before)."""
    if stored is None:
        return AsOf(Known.VALUE)
    if isinstance(stored, OpaqueValue):
        return _opaque_as_of(stored, txid, rows_expire=rows_expire)
    if isinstance(stored, TransactionalValue):
        if stored.txid <= txid:
            return AsOf(Known.VALUE, stored.val, stored.txid)
        return AsOf(Known.MOVED_ON, None, stored.txid)
    msg = f"a value without a txid cannot be read as of txid {txid}: {stored!r}"
    raise TypeError(msg)


def _opaque_as_of(stored: OpaqueValue[Any], txid: int, *, rows_expire: bool) -> AsOf:
    if stored.txid <= txid:
        return AsOf(Known.VALUE, stored.curr, stored.txid)
    if stored.txid == txid + 1:
        return AsOf(Known.VALUE, stored.prev, stored.txid)
    if stored.prev is None and not rows_expire:  # created by batch ``stored.txid``: absent before it
        return AsOf(Known.VALUE, None, stored.txid)
    return AsOf(Known.MOVED_ON, None, stored.txid)


def read_as_of(backing: CasBackingMap[Any, Any], spec: MapSpec, keys: Sequence[Hashable], txid: int,
               *, chunk: int = 5000) -> list[AsOf]:
    """``keys`` of ``spec``'s table read through ``backing`` (the backend's own decoding) as of ``txid``."""
    if spec.kind is StateKind.NON_TRANSACTIONAL:
        raise AsOfUnsupportedError(spec.table)
    out: list[AsOf] = []
    for i in range(0, len(keys), chunk):
        out += [as_of(v, txid, rows_expire=spec.ttl_s is not None) for v in backing.multi_get(list(keys[i:i + chunk]))]
    return out


def scan_keys(factory: Any, spec: MapSpec, *, page_size: int = 5000) -> Iterator[tuple[Any, ...]]:
    """Every key stored in ``spec``'s table (a :class:`~states.factory.StateFactory`'s backend), as key tuples."""
    if factory.backend == "sqlite":
        from states.sqlite.scan import scan_keys as sqlite_keys

        return sqlite_keys(factory.sqlite_path, spec)
    if factory.backend == "cassandra":
        from states.cassandra.scan import scan_keys as cassandra_keys

        return cassandra_keys(factory.cassandra, spec, page_size=page_size)
    msg = f"backend {factory.backend!r} keeps no table to scan"
    raise ValueError(msg)


def scan_stored(factory: Any, spec: MapSpec, *, page_size: int = 5000) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every key of ``spec``'s table with its stored value (read with :func:`as_of` as of any txid), in one scan
    of the table: no read per key."""
    if spec.kind is StateKind.NON_TRANSACTIONAL:
        raise AsOfUnsupportedError(spec.table)
    if factory.backend == "sqlite":
        from states.sqlite.scan import scan_rows as sqlite_rows

        return sqlite_rows(factory.sqlite_path, spec)
    if factory.backend == "cassandra":
        from states.cassandra.scan import scan_rows as cassandra_rows

        return cassandra_rows(factory.cassandra, spec, page_size=page_size)
    msg = f"backend {factory.backend!r} keeps no table to scan"
    raise ValueError(msg)
