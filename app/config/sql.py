"""Spark SQL in a pipeline's transforms, checked without Spark.

Each expression is parsed with sqlglot's Spark dialect (a syntax error is refused at its field)
and its column references are resolved against what the step sees: the spout's Arrow schema
first, then what each ``map`` selects and each ``each`` appends. An output whose name cannot be
told without Spark (``explode(x)`` with no alias) stops the resolution from there on, so a
config Spark would accept is never refused. Spark resolves names case-insensitively; so do we.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from spouts.kafka.arrow import SCHEMA

#: The columns a pipeline's first transform sees: the Kafka spout's Arrow schema.
SOURCE_COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)


class Columns:
    """The columns a transform step sees, or ``None`` once an output name cannot be told."""

    def __init__(self, names: Iterable[str] | None = SOURCE_COLUMNS) -> None:
        self.names: frozenset[str] | None = None if names is None else frozenset(n.lower() for n in names)

    def missing(self, wanted: Iterable[str]) -> list[str]:
        """The names in ``wanted`` that are not columns here (none when the columns are unknown)."""
        if self.names is None:
            return []
        return [w for w in wanted if w.lower() not in self.names]

    def shown(self) -> str:
        return ", ".join(sorted(self.names or ())) or "none"


def parse(text: str) -> exp.Expr:
    """One Spark SQL expression, or ValueError saying why it is not one."""
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except ParseError as e:
        where = e.errors[0] if e.errors else {}
        what = where.get("description") or _first_line(e)
        at = f" at column {where['col']}" if where.get("col") else ""
        msg = f"not a valid Spark SQL expression: {what}{at}: {text!r}"
        raise ValueError(msg) from None
    except TokenError as e:
        msg = f"not a valid Spark SQL expression: {_first_line(e)}: {text!r}"
        raise ValueError(msg) from None
    if isinstance(tree, (exp.Query, exp.Command, exp.DDL, exp.DML)):
        msg = f"expected an expression, got a {tree.key.upper()} statement: {text!r}"
        raise ValueError(msg)  # noqa: TRY004  a wrong kind of text, said as the bad value every caller catches
    return tree


def references(tree: exp.Expr) -> list[str]:
    """The columns an expression reads (the outer name of ``a.b``), lambda parameters left out."""
    params = {p.name.lower() for lam in tree.find_all(exp.Lambda) for p in lam.expressions}
    out: list[str] = []
    for col in tree.find_all(exp.Column):
        if isinstance(col.this, exp.Star):
            continue
        parts = col.parts
        name = parts[0].name if parts else col.name
        if name and name.lower() not in params and name not in out:
            out.append(name)
    return out


def outputs(tree: exp.Expr, seen: Columns) -> list[str] | None:
    """The column names a select expression produces, or None when only Spark could tell."""
    if isinstance(tree, exp.Aliases):
        return [e.name for e in tree.expressions]
    if isinstance(tree, exp.Alias):
        return [tree.alias]
    if isinstance(tree, exp.Star) or (isinstance(tree, exp.Column) and isinstance(tree.this, exp.Star)):
        return None if seen.names is None else sorted(seen.names)
    if isinstance(tree, exp.Column):
        return [tree.name]
    return None


def step(kind: str, trees: list[exp.Expr], seen: Columns) -> Columns:
    """The columns after a ``map`` (the selected ones), an ``each`` (appended) or a ``filter`` (unchanged)."""
    if kind == "filter":
        return seen
    produced: list[str] = []
    for t in trees:
        names = outputs(t, seen)
        if names is None:
            return Columns(None)
        produced += names
    if kind == "each":
        return Columns(None) if seen.names is None else Columns([*seen.names, *produced])
    return Columns(produced)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
