"""A lost state table and a row the state refuses are permanent failures, by type, also when carried from a
Spark task as data."""

from __future__ import annotations

import logging
from typing import Any

from app.failures import spark_fatal as fatal
from app.failures.policy import BAD_INPUT, FAILED, Failure, FailurePolicy
from spouts.protocols import SpoutKind
from states.errors import RowRefusedError, StateTableMissingError
from states.spec import StateKind


def test_a_lost_table_stops_the_pipeline_with_exit_2_naming_table_and_txid() -> None:
    """StateTableMissingError, even after an hour-long outage limit was not reached, is permanent at once (exit 2)
    and the reason names the table and the last committed txid; carried across Spark it stays the same."""
    error = fatal.decode(fatal.encode(StateTableMissingError("ks.word_counts").after(41)))
    assert isinstance(error, StateTableMissingError)
    assert error.committed_txid == 41
    d = FailurePolicy(outage_limit_s=3600).decide(Failure(error, txid=42, attempt=1))
    assert d.permanent
    assert d.exit_code == BAD_INPUT
    assert d.cause == "configuration"
    assert "ks.word_counts" in d.reason
    assert "txid 41" in d.reason
    assert "rewind --reset-state" in d.reason


def test_a_row_the_state_refuses_is_permanent_not_an_outage() -> None:
    """RowRefusedError (Cassandra's InvalidRequest on an existing table) is permanent at the first attempt."""
    error = fatal.decode(fatal.encode(RowRefusedError("ks.t", ("",), "Key may not be empty")))
    assert isinstance(error, RowRefusedError)
    assert error.key == ("",)
    d = FailurePolicy(outage_limit_s=3600).decide(Failure(error, txid=3, attempt=1))
    assert d.permanent
    assert d.exit_code == FAILED
    assert d.cause == "bad_record"
    assert "ks.t" in d.reason


def test_after_keeps_a_txid_already_named() -> None:
    assert StateTableMissingError("t", 5).after(9).committed_txid == 5


def test_a_retried_failure_is_logged_on_one_line_naming_the_pipeline(caplog: Any) -> None:
    """A transient failure whose message carries a worker's traceback (as a failed Spark task's does) is logged
    as one line that names the pipeline and the error, not the frames."""
    from tests.app.harness import World

    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE)
    world.append(0, "a")
    once = [True]

    def spark_like(point: str, txid: int) -> None:
        if point == "commit" and once:
            once.clear()
            raise RuntimeError('An error occurred while calling o87.collectToPython.\n: org.apache.spark.'
                               'SparkException: Job aborted: Traceback (most recent call last):\n  File "/x.py", '
                               'line 3, in f\n    raise InvalidRequest(...)\ncassandra.InvalidRequest: Error from '
                               'server: code=2200\n\n\tat org.apache.spark.api.python.Runner.handle(Runner.scala:1)')

    world.coordinator._faults = spark_like
    with caplog.at_level(logging.WARNING, logger="app.coordinator"):
        world.coordinator.run_until_idle()
    lines = [r.getMessage() for r in caplog.records if "replaying" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("pipeline world: txid 1 attempt 1 failed")
    assert "cassandra.InvalidRequest: Error from server: code=2200" in lines[0]
    assert "File " not in lines[0]
    assert "\n" not in lines[0]
    assert "Runner.scala" not in lines[0]
    assert world.stored_counts() == world.truth()
