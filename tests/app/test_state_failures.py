"""A lost state table and a row the state refuses are permanent failures, by type, also when carried from a
Spark task as data."""

from __future__ import annotations

from app.failures import BAD_INPUT, FAILED, Failure, FailurePolicy
from app.spark import fatal
from states.errors import RowRefusedError, StateTableMissingError


def test_a_lost_table_stops_the_pipeline_with_exit_2_naming_table_and_txid() -> None:
    """StateTableMissingError, even after an hour-long outage limit was not reached, is permanent at once (exit 2)
    and the reason names the table and the last committed txid; carried across Spark it stays the same."""
    error = fatal.decode(fatal.encode(StateTableMissingError("ks.word_counts").after(41)))
    assert isinstance(error, StateTableMissingError) and error.committed_txid == 41
    d = FailurePolicy(outage_limit_s=3600).decide(Failure(error, txid=42, attempt=1))
    assert d.permanent and d.exit_code == BAD_INPUT and d.cause == "configuration"
    assert "ks.word_counts" in d.reason and "txid 41" in d.reason and "rewind --reset-state" in d.reason


def test_a_row_the_state_refuses_is_permanent_not_an_outage() -> None:
    """RowRefusedError (Cassandra's InvalidRequest on an existing table) is permanent at the first attempt."""
    error = fatal.decode(fatal.encode(RowRefusedError("ks.t", ("",), "Key may not be empty")))
    assert isinstance(error, RowRefusedError) and error.key == ("",)
    d = FailurePolicy(outage_limit_s=3600).decide(Failure(error, txid=3, attempt=1))
    assert d.permanent and d.exit_code == FAILED and d.cause == "bad_record" and "ks.t" in d.reason


def test_after_keeps_a_txid_already_named() -> None:
    assert StateTableMissingError("t", 5).after(9).committed_txid == 5
