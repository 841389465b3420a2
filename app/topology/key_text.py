"""A state table's key typed from an operator's text, by the table's key columns (``query --key``, ``audit --key``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

_PARSE: dict[str, Callable[[str], Any]] = {"text": str, "bigint": int, "int": int, "double": float, "blob": bytes.fromhex,
          "timestamp": datetime.fromisoformat}


class KeyTextError(ValueError):
    """A key's text that does not name the table's key columns or does not parse as their types."""


def parse_key(spec: Any, text: str) -> tuple[Any, ...]:
    """``text`` as a typed key of ``spec``: 'v' (one column), 'v1,v2' (in order) or 'col=v,col=v'."""
    names = [c.name for c in spec.key]
    if len(names) == 1:
        parts = [text[len(names[0]) + 1:] if text.startswith(f"{names[0]}=") else text]
    else:
        parts = text.split(",")
        if all("=" in part for part in parts):
            given = dict(part.split("=", 1) for part in parts)
            if sorted(given) != sorted(names):
                msg = (
                    f"--key {text!r}: name every key column of table {spec.table!r}: "
                    f"{', '.join(names)}"
                )
                raise KeyTextError(msg)
            parts = [given[n] for n in names]
    if len(parts) != len(names):
        msg = f"--key {text!r}: table {spec.table!r} has {len(names)} key column(s): {', '.join(names)}"
        raise KeyTextError(msg)
    out = []
    for c, raw in zip(spec.key, parts, strict=True):
        try:
            out.append(_typed(c.type, raw))
        except ValueError as e:
            msg = f"--key {text!r}: column {c.name!r} is {c.type}: {e}"
            raise KeyTextError(msg) from None
    return tuple(out)


def _typed(type_: str, raw: str) -> Any:
    if type_ == "boolean":
        if raw.lower() not in ("true", "false"):
            msg = f"expected true or false, got {raw!r}"
            raise ValueError(msg)
        return raw.lower() == "true"
    return _PARSE[type_](raw)
