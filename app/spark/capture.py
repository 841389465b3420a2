"""A sink's transforms in an error-capturing form: a row an expression fails on is marked, not thrown.

Each ``map``/``each`` expression and each ``filter`` predicate is evaluated inside Spark's
``TryEval`` around ``struct(expr AS v)``: the struct is never null unless evaluating ``expr``
threw (an ANSI ``CAST``, a division by zero, a ``raise_error``), so ``tried IS NULL`` is the
error flag and ``tried.v`` the value. A row keeps the index of the first expression that failed on
it in :data:`ERROR_COLUMN` (a failed row passes every later filter, so it reaches the end and is
reported by its hidden source column). One job then finds every bad record of a txid, whatever
their number, and no task fails, so none is retried.

A Python function transform cannot be evaluated so, nor can a generator (``explode``, ``inline``,
``stack``, ...: Spark refuses a generator nested in an expression) (:func:`capturable` is False):
such a sink's transform errors are still found by bisection (:func:`app.spark.bad_record_finding.isolate`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.spark.jvm import active_gateway, java_column

if TYPE_CHECKING:
    from app.spark.plan import Step

ERROR_COLUMN = "_error"  # int: the index (in :func:`expressions`) of the first expression that failed on the row
_TRIED = "_tried_"
#: A column, maybe renamed: nothing is evaluated that could throw (a struct's field may be a map's key: tried).
_COLUMN = re.compile(r"\s*(`[^`]+`|[A-Za-z_]\w*)(\s+(AS\s+)?(`[^`]+`|[A-Za-z_]\w*))?\s*", re.IGNORECASE)


def capturable(steps: Sequence[Step]) -> bool:
    """Whether every step is SQL without a generator (a function transform or an ``explode`` cannot be
    evaluated in the capturing form: a generator must stay a select's top-level expression)."""
    from app.spark.plan import one_row_per_record

    return one_row_per_record(steps)


def expressions(steps: Sequence[Step]) -> list[str]:
    """Every expression of ``steps`` in order; :data:`ERROR_COLUMN` indexes this list."""
    return [e for s in steps for e in s.transform.exprs]


def cannot_fail(expr: str) -> bool:
    """Whether ``expr`` only names a column (maybe renamed), or is the hidden source column: nothing to try."""
    from app.spark.plan import SOURCE_COLUMN, SOURCE_SQL

    return _COLUMN.fullmatch(expr) is not None or expr.strip() == f"{SOURCE_SQL} AS {SOURCE_COLUMN}"


def tried(column: Any) -> Any:
    """``column`` as ``TryEval(struct(column AS v))``: null exactly when evaluating ``column`` threw."""
    from pyspark.sql import functions as sf
    from pyspark.sql.classic.column import Column

    jvm = active_gateway()  # the session's context (an active session is per thread)
    utils = jvm.org.apache.spark.sql.classic.ExpressionUtils
    struct = utils.expression(java_column(sf.struct(column.alias("v"))))
    return Column(utils.column(jvm.org.apache.spark.sql.catalyst.expressions.TryEval(struct)))


def capture(df: Any, steps: Sequence[Step]) -> Any:
    """``steps`` applied to ``df`` in the capturing form: their columns plus :data:`ERROR_COLUMN`.

    Each DataFrame operation is analysed on the driver as it is made, so their number is this form's
    fixed cost per txid: a step is one operation when none of its expressions can fail (a column, maybe
    renamed), else two (three for a filter): one evaluates the expressions, those that may fail tried,
    the next marks the rows and takes the tried values.
    """
    from pyspark.sql import functions as sf

    df = df.withColumn(ERROR_COLUMN, sf.lit(None).cast("int"))
    index = 0
    for step in steps:
        first, index = index, index + len(step.transform.exprs)
        df = _filter(df, first, step.transform.exprs[0]) if step.transform.kind == "filter" else \
            _project(df, step, first)
    return df


def _project(df: Any, step: Step, first: int) -> Any:
    """A ``select`` or ``with`` step in the capturing form."""
    from pyspark.sql import functions as sf

    from app.spark.plan import is_star

    t = step.transform
    names = iter(step.names)
    outputs = [(None if is_star(e) else next(names), k, e) for k, e in enumerate(t.exprs, first)]
    tries = [(n, k, e) for n, k, e in outputs if n is not None and not cannot_fail(e)]
    plain = [(n, e) for n, _, e in outputs if n is None or cannot_fail(e)]
    if t.kind == "with":
        df = df.withColumns({**{n: sf.expr(e) for n, e in plain if n is not None},
                             **{f"{_TRIED}{k}": tried(sf.expr(e)) for _, k, e in tries}})
    else:  # a select: stars pass through (they cannot fail); ERROR_COLUMN is kept (a "*" keeps it already)
        df = df.select(*[sf.expr(e) for _, e in plain], *[tried(sf.expr(e)).alias(f"{_TRIED}{k}") for _, k, e in tries],
                       *([] if any(e.strip() == "*" for e in t.exprs) else [sf.col(ERROR_COLUMN)]))
    if not tries:
        return df
    made = {n for n, _, _ in tries}
    return df.select(*[_mark([(k, f"{_TRIED}{k}") for _, k, _ in tries]) if c == ERROR_COLUMN else _col(c)
                       for c in df.columns if not c.startswith(_TRIED) and c not in made],
                     *[sf.col(f"{_TRIED}{k}.v").alias(n) for n, k, _ in tries])


def _filter(df: Any, k: int, expr: str) -> Any:
    """A ``filter`` step in the capturing form: a row it fails on is kept, marked."""
    from pyspark.sql import functions as sf

    columns = df.columns
    df = df.withColumn(_TRIED, tried(sf.expr(expr)))
    df = df.filter(sf.col(ERROR_COLUMN).isNotNull() | sf.col(_TRIED).isNull() | sf.coalesce(sf.col(f"{_TRIED}.v"),
                                                                                      sf.lit(False)))
    return df.select(*[_mark([(k, _TRIED)]) if c == ERROR_COLUMN else _col(c) for c in columns])


def _col(name: str) -> Any:
    """Column ``name`` itself (a dot in it is no field access)."""
    from pyspark.sql import functions as sf

    return sf.col("`" + name.replace("`", "``") + "`")


def _mark(tries: list[tuple[int, str]]) -> Any:
    """:data:`ERROR_COLUMN` of a row not yet marked set to the first of ``tries`` that failed on it."""
    from pyspark.sql import functions as sf

    first = sf.when(sf.col(tries[0][1]).isNull(), sf.lit(tries[0][0]))
    for k, name in tries[1:]:
        first = first.when(sf.col(name).isNull(), sf.lit(k))
    return sf.coalesce(sf.col(ERROR_COLUMN), first).alias(ERROR_COLUMN)


def step_of(steps: Sequence[Step], index: int) -> int:
    """The position in ``steps`` of the step holding expression ``index`` (of :func:`expressions`)."""
    seen = 0
    for i, s in enumerate(steps):
        seen += len(s.transform.exprs)
        if index < seen:
            return i
    raise IndexError(index)


def reads_place(step: Step, place: frozenset[str]) -> bool:
    """Whether ``step`` may read one of the ``place`` columns (a word of its SQL other than a bare pass-through
    of the column; a function step always may)."""

    if step.transform.kind == "function":
        return True
    words = re.compile(r"\b(" + "|".join(re.escape(p) for p in sorted(place)) + r")\b", re.IGNORECASE)
    return any(words.search(e) for e in step.transform.exprs if e.strip() not in place)
