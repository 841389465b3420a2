"""How a map state is laid out in a table: kind, typed key columns, typed value columns.

Durable backends turn a :class:`MapSpec` into a table people can query: one column per key
field, one per value field, plus ``txid`` (and ``prev_<value>`` for opaque state). Keys are
tuples in key-column order; a value is a scalar when there is one value column, else a tuple.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from states.errors import InvalidIdentifierError
from states.stamped import AT_SUFFIX

# Column types a state may use, named as in CQL. Backends map them to their own types.
COLUMN_TYPES = frozenset({"text", "bigint", "int", "double", "boolean", "blob", "timestamp"})
_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
RESERVED = frozenset({"txid", "select", "from", "where", "and", "key", "table", "token", "limit", "order", "by",
                      "insert", "update", "delete", "into", "values", "set", "if", "exists", "not", "primary"})


class StateKind(enum.Enum):
    """Which fault-tolerance rule a map state applies (see the ``states`` package docstring)."""

    OPAQUE = "opaque"
    TRANSACTIONAL = "transactional"
    NON_TRANSACTIONAL = "non_transactional"


def check_identifier(name: str, what: str = "identifier") -> str:
    """``name`` if it is a safe lower-case identifier (no quoting, no CQL/SQL injection), else raise."""
    if not isinstance(name, str) or not _IDENT.match(name) or name in RESERVED:
        msg = (
            f"invalid {what} {name!r}: use 1-48 lower-case letters, digits and underscores, starting with a "
            f"letter, and not a reserved word"
        )
        raise InvalidIdentifierError(msg)
    return name


DELETED_COLUMN = "deleted"  # the tombstone flag of a table whose tombstones delete (a stamped boolean)


@dataclass(frozen=True, slots=True)
class Column:
    """A typed column; a ``stamped`` one (``latest``/``first``) is stored with ``<name>_at`` beside it."""

    name: str
    type: str
    stamped: bool = False

    def __post_init__(self) -> None:
        check_identifier(self.name, "column name")
        if self.name.startswith("prev_"):
            msg = f"column name {self.name!r}: the prefix prev_ is reserved for opaque state"
            raise InvalidIdentifierError(msg)
        if self.type not in COLUMN_TYPES:
            msg = f"column {self.name!r}: unsupported type {self.type!r} (one of {sorted(COLUMN_TYPES)})"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class MapSpec:
    """A map state's table: name, kind, key columns and value columns.

    ``tombstones``: the last value column is the stamped :data:`DELETED_COLUMN` flag, and a key
    whose flag is true reads as absent (its row stays, with its txid). ``ttl_s``: every write of
    a key sets its row to expire that long after (backends without TTL refuse it).
    """

    table: str
    kind: StateKind
    key: tuple[Column, ...]
    value: tuple[Column, ...]
    tombstones: bool = False
    ttl_s: int | None = None

    def __post_init__(self) -> None:
        check_identifier(self.table, "table name")
        if not self.key or not self.value:
            msg = f"table {self.table!r} needs at least one key column and one value column"
            raise ValueError(msg)
        names = [c.name for c in self.key + self.value] + [c.name + AT_SUFFIX for c in self.value if c.stamped]
        if len(set(names)) != len(names):
            msg = f"table {self.table!r}: duplicate column names in {names}"
            raise ValueError(msg)
        if self.tombstones and (self.value[-1].name != DELETED_COLUMN or self.value[-1].type != "boolean"
                                or not self.value[-1].stamped):
            msg = (
                f"table {self.table!r}: with tombstones the last value column is the stamped boolean "
                f"{DELETED_COLUMN!r}"
            )
            raise ValueError(msg)
        if self.ttl_s is not None and self.ttl_s < 1:
            msg = f"table {self.table!r}: ttl_s must be at least 1 second, got {self.ttl_s}"
            raise ValueError(msg)

    @property
    def scalar(self) -> bool:
        """True when values are scalars (one value column), False when tuples."""
        return len(self.value) == 1
