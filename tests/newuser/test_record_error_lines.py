"""A txid's bad records cost the log one short line, whatever their number; each record's own line is at DEBUG."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry

from app.bad_records.error_policy import BadRecordHandler, ErrorPolicy, brief
from app.metrics import Metrics
from app.spark.isolation_report import SLOW_S, Isolation
from spouts.bad_records import BadRecord, Stage

SPARK_TEXT = ("NumberFormatException: [CAST_INVALID_INPUT] The value 'x99' of the type \"STRING\" cannot be cast to "
              '"INT" because it is malformed. Correct the value as per the syntax, or change its target type. Use '
              "`try_cast` to tolerate malformed input and return NULL instead. SQLSTATE: 22018 == SQL (line 1, "
              "position 6) == CAST(value AS INT) ^^^^^^^^^^^^^^^^^^")


def cast_error(offset: int) -> BadRecord:
    return BadRecord("t", 1, offset, Stage.TRANSFORM, "CAST_INVALID_INPUT", SPARK_TEXT)


def test_skipping_a_txids_bad_records_is_one_line_naming_the_first(caplog: Any) -> None:
    """200 bad records skipped in one txid: one WARNING line with the count, the kind and the first record's
    coordinates and reason; the 200 per-record lines only at DEBUG."""
    handler = BadRecordHandler("sales", ErrorPolicy.skip(), Metrics(CollectorRegistry()))
    caplog.set_level(logging.DEBUG, logger="app.bad_records.error_policy")
    handler.settle(4, [cast_error(o) for o in range(99, 20_000, 100)], progress=None)  # type: ignore[arg-type]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert warnings == [("pipeline sales txid 4: skipped 200 bad records (transform CAST_INVALID_INPUT 200); first "
                        "t[1]@99: The value 'x99' of the type \"STRING\" cannot be cast to \"INT\" because it is "
                        "malformed.")]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 200
    assert "t[1]@19999" in debug[-1]


def test_an_error_text_without_a_short_first_sentence_is_cut() -> None:
    assert brief("a\n  b") == "a b"
    assert brief("SparkArithmeticException: [DIVIDE_BY_ZERO] Division by zero. Use `try_divide`.",
                 "DIVIDE_BY_ZERO") == "Division by zero."
    assert len(brief("x" * 500)) == 160
    assert brief("x" * 500).endswith("...")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_quick_isolation_logs_nothing_at_info_and_a_slow_one_says_its_rounds(caplog: Any) -> None:
    """Isolation ending within SLOW_S is DEBUG only (the skip line names the records); past it, each round and
    the summary are INFO lines naming the pipeline and txid."""
    caplog.set_level(logging.INFO, logger="app.spark.isolation_report")
    clock, metrics = Clock(), Metrics(CollectorRegistry())
    quick = Isolation("sales", 3, "transform", 2000, metrics, clock=clock)
    quick.round("error-capturing run", 1, 20)
    clock.now += 1
    quick.round("errors named", 0, 20)
    quick.done([cast_error(o) for o in range(20)])
    assert caplog.records == []
    slow = Isolation("sales", 4, "transform", 2000, metrics, clock=clock)
    slow.round("error-capturing run", 1, 20)
    clock.now += SLOW_S + 1
    slow.round("errors named", 1, 20)
    slow.round("errors named again", 0, 20)  # the last round: the summary says the rest
    slow.done([cast_error(o) for o in range(20)])
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [("pipeline sales txid 4: isolation round 2 (errors named): 1 slices left, 20 bad records found "
                     "(6.0 s)"), "pipeline sales txid 4: isolated 20 bad records of 2000 in 3 rounds (3 jobs, 6.0 s)"]
