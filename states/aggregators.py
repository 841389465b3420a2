"""Combiner aggregators: how per-batch partials are made and merged into stored values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from states.stamped import Stamped


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
class Latest:
    """The value of the record with the highest ``(timestamp, partition, offset)``: an upsert.

    Inputs and partials are :class:`~states.stamped.Stamped` values (a record's place and a
    value); the stored value keeps its place, so a later batch's partial wins only if its record
    is newer, and the choice is the same whichever way partials are grouped.
    """

    name: str = "latest"

    def init(self, value: Any) -> Stamped | None:
        return None if value is None else Stamped.of(value)

    def combine(self, a: Any, b: Any) -> Stamped | None:
        x, y = self.partial_of(a), self.partial_of(b)
        return y if x is None else x if y is None else max(x, y, key=Stamped.place)

    def zero(self) -> None:
        return None

    def partial_of(self, column: Any) -> Stamped | None:
        """A partial as it arrives from a Spark result column (a struct row) or from Python."""
        return None if column is None else Stamped.of(column)


@dataclass(frozen=True, slots=True)
class First:
    """The value of the record with the lowest ``(timestamp, partition, offset)``: the first one seen."""

    name: str = "first"

    def init(self, value: Any) -> Stamped | None:
        return None if value is None else Stamped.of(value)

    def zero(self) -> None:
        return None

    def partial_of(self, column: Any) -> Stamped | None:
        """A partial as it arrives from a Spark result column (a struct row) or from Python."""
        return None if column is None else Stamped.of(column)

    def combine(self, a: Any, b: Any) -> Stamped | None:
        x, y = self.partial_of(a), self.partial_of(b)
        return y if x is None else x if y is None else min(x, y, key=Stamped.place)


STAMPED = (Latest, First)  # aggregators whose values carry their record's place (two columns each)


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
    """The updater that merges a batch's ``partial`` into a stored value (None = nothing yet).

    An aggregator with a ``partial_of`` method (``latest``/``first``) first turns the partial as
    it arrives from a result column (a Spark struct row) into its own value type.
    """
    convert = getattr(aggregator, "partial_of", None)
    if convert is not None:
        partial = convert(partial)
    return lambda stored: partial if stored is None else aggregator.combine(stored, partial)
