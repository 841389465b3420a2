"""Which expressions the error-capturing form evaluates plainly (nothing in them can throw) and which it tries:
fast, no Spark session (the capturing form's cost and results are tested on Spark in the slow suite)."""

from __future__ import annotations

import pytest

from app.spark.capture import cannot_fail
from app.spark.plan import SOURCE_COLUMN, SOURCE_SQL


@pytest.mark.parametrize("expr", ["user", " user ", "user AS u", "user u", "`odd name` AS `x y`", "_a1 AS b",
                                  f"{SOURCE_SQL} AS {SOURCE_COLUMN}", f" {SOURCE_SQL} AS {SOURCE_COLUMN} "])
def test_a_column_maybe_renamed_or_the_source_column_cannot_fail(expr: str) -> None:
    """Nothing is evaluated: the step costs one DataFrame operation, no tried column."""
    assert cannot_fail(expr)


@pytest.mark.parametrize("expr", ["CAST(amount AS BIGINT)", "CAST(amount AS BIGINT) AS amount", "100 DIV amount",
                                  "a.b", "m['k']", "raise_error('x')", "upper(user) AS user", "1",
                                  "amount + 1 AS a", f"{SOURCE_SQL} AS other"])
def test_an_expression_that_evaluates_anything_is_tried(expr: str) -> None:
    """A cast, arithmetic, a field or map access (a map's key may be missing), a function: tried, so a row it
    throws on is marked rather than failing its task."""
    assert not cannot_fail(expr)
