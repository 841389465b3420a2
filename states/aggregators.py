"""Combiner aggregators: how per-batch partials are made and merged into stored values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class CombinerAggregator(Protocol):
    """Trident's ``CombinerAggregator``: ``init`` one input, ``combine`` two partials, ``zero``.

    ``combine`` must be associative and commutative: partials are merged in any grouping, in
    Spark and then with the stored value. ``name`` names the value column(s) it produces.
    """

    @property
    def name(self) -> str:
        """The value column this aggregator fills."""
        ...

    def init(self, value: Any) -> Any: ...

    def combine(self, a: Any, b: Any) -> Any: ...

    def zero(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Count:
    """Number of records."""

    name: str = "count"

    def init(self, value: Any) -> int:
        return 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class Sum:
    """Sum of a numeric field (nulls ignored)."""

    name: str = "sum"

    def init(self, value: Any) -> Any:
        return 0 if value is None else value

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def zero(self) -> Any:
        return 0


@dataclass(frozen=True, slots=True)
class Min:
    """Smallest value of a field; None (no value yet) loses to any value."""

    name: str = "min"

    def init(self, value: Any) -> Any:
        return value

    def combine(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else min(a, b)

    def zero(self) -> Any:
        return None


@dataclass(frozen=True, slots=True)
class Max:
    """Largest value of a field; None (no value yet) loses to any value."""

    name: str = "max"

    def init(self, value: Any) -> Any:
        return value

    def combine(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else max(a, b)

    def zero(self) -> Any:
        return None


@dataclass(frozen=True, slots=True)
class _Combiner:
    name: str
    init_fn: Callable[[Any], Any]
    combine_fn: Callable[[Any, Any], Any]
    zero_value: Any

    def init(self, value: Any) -> Any:
        return self.init_fn(value)

    def combine(self, a: Any, b: Any) -> Any:
        return self.combine_fn(a, b)

    def zero(self) -> Any:
        return self.zero_value


def combiner(name: str, init: Callable[[Any], Any], combine: Callable[[Any, Any], Any], zero: Any) -> CombinerAggregator:
    """Define a new combiner aggregator from three functions, e.g. a sum of squares."""
    return _Combiner(name, init, combine, zero)


def combine_updater(aggregator: CombinerAggregator, partial: Any) -> Callable[[Any], Any]:
    """The updater that merges a batch's ``partial`` into a stored value (None = nothing yet)."""
    return lambda stored: partial if stored is None else aggregator.combine(stored, partial)
