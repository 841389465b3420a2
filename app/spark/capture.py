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
such a sink's transform errors are still found by bisection (:func:`app.spark.bad_records.isolate`).
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
def capturable(steps: Sequence[Step]) -> bool:
    """Whether every step is SQL without a generator (a function transform or an ``explode`` cannot be
    evaluated in the capturing form: a generator must stay a select's top-level expression)."""
    from app.spark.plan import one_row_per_record

    return one_row_per_record(steps)


def expressions(steps: Sequence[Step]) -> list[str]:
    """Every expression of ``steps`` in order; :data:`ERROR_COLUMN` indexes this list."""
    return [e for s in steps for e in s.transform.exprs]


def _star(expr: str) -> bool:
    e = expr.strip()
    return e == "*" or e.endswith(".*")


def tried(column: Any) -> Any:
    """``column`` as ``TryEval(struct(column AS v))``: null exactly when evaluating ``column`` threw."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.column import Column

    jvm = active_gateway()  # the session's context (an active session is per thread)
    utils = jvm.org.apache.spark.sql.classic.ExpressionUtils
    struct = utils.expression(java_column(F.struct(column.alias("v"))))
    return Column(utils.column(jvm.org.apache.spark.sql.catalyst.expressions.TryEval(struct)))


def capture(df: Any, steps: Sequence[Step]) -> Any:
    """``steps`` applied to ``df`` in the capturing form: their columns plus :data:`ERROR_COLUMN`."""
    from pyspark.sql import functions as F

    df = df.withColumn(ERROR_COLUMN, F.lit(None).cast("int"))
    index = 0
    for step in steps:
        t = step.transform
        exprs = [(index + j, e) for j, e in enumerate(t.exprs)]
        index += len(t.exprs)
        if t.kind == "filter":
            (k, e), = exprs
            df = df.withColumn(_TRIED, tried(F.expr(e)))
            df = _mark(df, [(k, _TRIED)])
            df = df.filter(F.col(ERROR_COLUMN).isNotNull() | F.coalesce(F.col(f"{_TRIED}.v"), F.lit(False)))
            df = df.drop(_TRIED)
            continue
        if t.kind == "with":
            named = list(zip(step.names, exprs, strict=True))
            df = df.withColumns({f"{_TRIED}{k}": tried(F.expr(e)) for _, (k, e) in named})
        else:  # select: stars pass through (they cannot fail), the rest is tried
            names = {k: df.selectExpr(e).columns[0] for k, e in exprs if not _star(e)}
            keeps_error = any(e.strip() == "*" for _, e in exprs)
            df = df.select(*[F.expr(e) for k, e in exprs if _star(e)],
                           *[tried(F.expr(e)).alias(f"{_TRIED}{k}") for k, e in exprs if not _star(e)],
                           *([] if keeps_error else [F.col(ERROR_COLUMN)]))
            named = [(names[k], (k, e)) for k, e in exprs if not _star(e)]
        df = _mark(df, [(k, f"{_TRIED}{k}") for _, (k, _) in named])
        df = df.withColumns({n: F.col(f"{_TRIED}{k}.v") for n, (k, _) in named})
        df = df.drop(*[f"{_TRIED}{k}" for _, (k, _) in named])
    return df


def _mark(df: Any, tries: list[tuple[int, str]]) -> Any:
    """Set :data:`ERROR_COLUMN` of a row not yet marked to the first of ``tries`` that failed on it."""
    from pyspark.sql import functions as F

    if not tries:
        return df
    first = F.when(F.col(tries[0][1]).isNull(), F.lit(tries[0][0]))
    for k, name in tries[1:]:
        first = first.when(F.col(name).isNull(), F.lit(k))
    return df.withColumn(ERROR_COLUMN, F.coalesce(F.col(ERROR_COLUMN), first))


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
