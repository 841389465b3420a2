"""The parts a stream is built of: a transform of its records and an aggregate into a sink (plain data).

They sit below :mod:`app.topology.topology`, which chains them into streams and sinks, and :mod:`app.topology.upserts`,
which adds the steps a latest-value sink needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from states.aggregators import CombinerAggregator
from states.spec import check_identifier


@dataclass(frozen=True, slots=True)
class Transform:
    """One step on the records DataFrame.

    ``select``: Spark SQL expressions replacing the columns (``map``); ``with``: expressions
    appended as new columns (``each``); ``filter``: a SQL predicate; ``function``: a Python
    function ``DataFrame -> DataFrame``.
    """

    kind: str  # "select" | "with" | "filter" | "function"
    exprs: tuple[str, ...] = ()
    function: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("select", "with", "filter", "function"):
            msg = f"unknown transform kind {self.kind!r}"
            raise ValueError(msg)
        if (self.kind == "function") != (self.function is not None) or (self.kind != "function" and not self.exprs):
            msg = f"transform {self.kind!r} needs {'a function' if self.kind == 'function' else 'expressions'}"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class Agg:
    """One aggregate: ``aggregator`` over column ``input`` (None for Count), stored as column ``output``."""

    aggregator: CombinerAggregator
    output: str
    input: str | None = None

    def __post_init__(self) -> None:
        check_identifier(self.output, "aggregate output column")
