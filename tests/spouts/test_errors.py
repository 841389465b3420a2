"""Spout and state errors: one base per package, and the fatal sets a coordinator never retries."""

from __future__ import annotations

import inspect

import spouts.errors
import states.errors
from spouts.errors import FATAL as SPOUT_FATAL
from spouts.errors import DataLossError, PartitionUnavailableError, SpoutError
from states.errors import FATAL as STATE_FATAL
from states.errors import (
    CommitProtocolError,
    LeaseHeldError,
    LeaseLostError,
    RowRefusedError,
    StaleBatchError,
    StateError,
    UnknownOutcomeError,
)


def _exceptions(module: object) -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, BaseException) and c.__module__ == getattr(module, "__name__", None)]


def test_every_error_has_its_package_base() -> None:
    """Each exception defined in spouts.errors / states.errors derives from SpoutError / StateError."""
    assert {DataLossError, PartitionUnavailableError} <= set(_exceptions(spouts.errors))
    assert all(issubclass(c, SpoutError) for c in _exceptions(spouts.errors))
    assert UnknownOutcomeError in _exceptions(states.errors)
    assert all(issubclass(c, StateError) for c in _exceptions(states.errors))


def test_fatal_sets_hold_what_a_replay_cannot_fix() -> None:
    """Data loss, a lost or held lease, a batch behind the state, a map written outside a commit and a row the
    database refuses for itself are fatal; an unavailable partition is not."""
    assert set(SPOUT_FATAL) == {DataLossError}
    assert set(STATE_FATAL) == {LeaseLostError, LeaseHeldError, StaleBatchError, CommitProtocolError, RowRefusedError}
    assert not issubclass(PartitionUnavailableError, SPOUT_FATAL)
