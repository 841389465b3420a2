"""Cassandra's limits on a partition key (``QueryProcessor.validateKey``), as :class:`~states.limits.KeyLimits`.

A one-column partition key is its value's bytes: it may not be empty, nor longer than 65535 bytes.
A composite one is serialized as each value's 2-byte length, its bytes and an end-of-component byte;
the whole may not pass 65535 bytes (an empty component is allowed).
"""

from __future__ import annotations

from states.layout import RowLayout
from states.limits import KeyLimits

MAX_KEY_BYTES = 65535  # an unsigned short: the length prefix of a partition key
#: Serialized sizes of the fixed-size column types (text and blob count their bytes).
FIXED = (("bigint", 8), ("int", 4), ("double", 8), ("boolean", 1), ("timestamp", 8))
_VARIABLE = frozenset({"text", "blob"})


def key_limits(layout: RowLayout) -> KeyLimits:
    """The limits of the partition key of ``layout``'s table."""
    columns = layout.key_columns
    one = len(columns) == 1
    return KeyLimits(layout.spec.table, columns, MAX_KEY_BYTES,
                     non_empty=tuple(n for n, t in columns if one and t in _VARIABLE),
                     overhead=0 if one else 3, fixed=FIXED)
