"""What a backend refuses in a row's key, as data: a pure check run before any write.

A key the database would refuse for the row itself (Cassandra: an empty one-column partition key,
"Key may not be empty"; a serialized partition key over 65535 bytes) can never be stored, however
often it is retried. Known before the commit, such a key is a bad record of its source record, the
same decision on every replay (``app.spark.bad_record_finding``); the commit never sends it. A backend
without such limits (SQLite, memory) has none: ``StateFactory.key_limits`` returns None for it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class KeyProblem(enum.StrEnum):
    """Why a backend refuses a key (a bad record's reason)."""

    EMPTY = "EMPTY_KEY"  # an empty text or blob where the backend needs a non-empty key
    TOO_LONG = "KEY_TOO_LONG"  # the serialized key is over the backend's bound


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A table's key limits: ``columns`` (name, type) in key order, each serialized as its UTF-8 or raw bytes
    (``fixed`` sizes for the others) plus ``overhead`` bytes; the whole over ``max_bytes`` is refused, and so is
    an empty value in one of ``non_empty``."""

    table: str
    columns: tuple[tuple[str, str], ...]
    max_bytes: int
    non_empty: tuple[str, ...] = ()
    overhead: int = 0  # bytes added per column (a composite key's length and end-of-component marker)
    fixed: tuple[tuple[str, int], ...] = ()  # type -> serialized size, for the types of fixed size

    def size_of(self, column_type: str) -> int | None:
        """The serialized size of a value of ``column_type`` (None: variable, its bytes count)."""
        return dict(self.fixed).get(column_type)

    def problem(self, key: Sequence[Any]) -> KeyProblem | None:
        """Why the backend would refuse ``key`` (values in column order), or None when it can store it."""
        values = dict(zip((n for n, _ in self.columns), key, strict=True))
        if any(values[n] in ("", b"") for n in self.non_empty):
            return KeyProblem.EMPTY
        total = 0
        for (_, type_), value in zip(self.columns, key, strict=True):
            size = self.size_of(type_)
            if size is None:
                size = len(value.encode()) if isinstance(value, str) else len(value)
            total += size + self.overhead
        return KeyProblem.TOO_LONG if total > self.max_bytes else None

    def message(self, problem: KeyProblem) -> str:
        """One line for people: what the backend refuses, naming the table and its key columns."""
        cols = ", ".join(n for n, _ in self.columns)
        if problem is KeyProblem.EMPTY:
            return f"empty key ({cols}) cannot be stored in table {self.table}"
        return f"key ({cols}) longer than {self.max_bytes} bytes cannot be stored in table {self.table}"
