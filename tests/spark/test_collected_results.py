"""Which txids' keyed results the process job collects to the driver (their commit then runs no Spark job)."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa
import pytest

from app.spark.committing import Commits
from app.spark.processing import COLLECT_ALL, SinkResult, _released_on_error
from app.topology.batch import Batch
from spouts.metadata import BatchPlan


def _batch(attempt: int = 1) -> Batch:
    return Batch(7, attempt, BatchPlan(7, {}), frozen=True)


def _result(keys: int) -> SinkResult:
    return SinkResult(cast(Any, None), keys=keys, collected=pa.table({"k": list(range(keys))}))


def test_a_txid_is_collected_below_the_threshold_or_when_its_keys_are_expected_few() -> None:
    """Threshold 100: fewer planned records are collected whatever their rows; 100 or more while fewer than 100 keys
    are expected at the keys per record of the txid before; a replay never collects; a global partial teaches
    nothing."""
    commits = Commits(cast(Any, None), None, None, cast(Any, None), driver_keys=100)
    assert commits.collects(_batch(), 99) == COLLECT_ALL
    commits.processed(1_000, [_result(10), SinkResult(cast(Any, None), keys=1, partial=5)])  # 0.01 keys a record
    assert commits.collects(_batch(), 9_900) == COLLECT_ALL  # 99 keys expected
    assert commits.collects(_batch(attempt=2), 99) == 0
    commits.processed(100, [_result(90)])  # 0.9 keys a record
    assert commits.collects(_batch(), 111) == COLLECT_ALL  # 99.9 keys expected
    assert commits.collects(_batch(attempt=2), 111) == 0


def test_a_txid_whose_keys_are_unsure_is_cached_and_collected_when_it_holds_fewer_than_the_threshold() -> None:
    """More keys expected than the threshold: while the txid before had fewer keys (or there was none), its job
    caches the result and collects it when it holds fewer (a bounded collect); once a txid had as many, cached
    only."""
    commits = Commits(cast(Any, None), None, None, cast(Any, None), driver_keys=100)
    assert commits.collects(_batch(), 100) == 100  # nothing known of its keys
    commits.processed(1_000, [_result(10)])  # 10 keys, 0.01 a record
    assert commits.collects(_batch(), 10_000) == 100  # 100 keys expected, the last txid had 10
    assert commits.collects(_batch(attempt=2), 10_000) == 0
    commits.processed(10_000, [_result(100)])  # as many keys as the threshold
    assert commits.collects(_batch(), 20_000) == 0
    assert commits.collects(_batch(), 99) == COLLECT_ALL  # few records: collected whatever the history


def test_no_result_is_collected_when_every_commit_runs_in_tasks() -> None:
    """Threshold 0 (every keyed result committed by Spark tasks): nothing is collected, whatever was learnt."""
    commits = Commits(cast(Any, None), None, None, cast(Any, None), driver_keys=0)
    assert commits.collects(_batch(), 1) == 0
    commits.processed(1_000, [_result(0)])
    assert commits.collects(_batch(), 1) == 0
    assert commits.collects(_batch(), 1_000) == 0


class _Frame:
    """A persisted frame that records its release."""

    def __init__(self) -> None:
        self.released = 0

    def unpersist(self, blocking: bool = False) -> None:
        self.released += 1


def test_a_result_is_released_when_checking_its_rows_fails_and_kept_otherwise() -> None:
    """A sink's cached result whose check raises is released (nobody will commit it); a checked one is kept."""
    failed, kept = _Frame(), _Frame()
    with pytest.raises(RuntimeError), _released_on_error(SinkResult(cast(Any, None), failed, keys=3)):
        raise RuntimeError("the observation could not be read")
    with _released_on_error(SinkResult(cast(Any, None), kept, keys=3)) as done:
        assert done.frame is kept
    assert (failed.released, kept.released) == (1, 0)
