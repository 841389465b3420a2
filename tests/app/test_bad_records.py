"""The error policy without Spark: isolating bad records by bisection, settling them, the failure class."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from app.bad_records.dead_letters import coordinates_of, letter_headers
from app.bad_records.error_policy import Action, BadRecordHandler, ErrorPolicy, in_order
from app.failures.policy import FAILED, Failure, FailurePolicy
from app.metrics import Metrics
from app.spark.bad_record_finding import RecordError, isolate, record_error, sub_ranges
from spouts.bad_records import BadRecord, BadRecordError, Stage
from spouts.protocols import Record

CAST = RecordError(Stage.TRANSFORM, "CAST_INVALID_INPUT", "bad cast")


def coords(n: int) -> list[tuple[str, int, int]]:
    return sorted(("t", i % 3, 10 + i // 3) for i in range(n))


def probe_failing_on(bad: set[tuple[str, int, int]], calls: list[Any]) -> Any:
    def probe(parts: Any) -> RecordError | None:
        calls.append(parts)
        inside = {c for c in bad if any(m.topic == c[0] and m.partition == c[1]
                                        and m.first_offset <= c[2] < m.next_offset for m in parts)}
        return CAST if inside else None
    return probe


@pytest.mark.parametrize("seed", range(20))
def test_bisection_finds_exactly_the_bad_records(seed: int) -> None:
    """Whatever records are bad (none, one, several, adjacent), bisection finds exactly them, probing fewer
    slices than one per record."""
    rng = random.Random(seed)
    all_ = coords(rng.randint(1, 300))
    bad = set(rng.sample(all_, rng.randint(0, min(5, len(all_)))))
    calls: list[Any] = []
    found = isolate(all_, probe_failing_on(bad, calls), "p")
    assert {(b.topic, b.partition, b.offset) for b in found} == bad
    assert all(b.stage is Stage.TRANSFORM and b.reason == "CAST_INVALID_INPUT" for b in found)
    assert len(calls) <= max(2, 4 * len(bad) * max(1, len(all_)).bit_length())


def test_bisection_first_only_stops_at_the_lowest_bad_record() -> None:
    all_ = coords(100)
    bad = {all_[17], all_[80]}
    found = isolate(all_, probe_failing_on(bad, []), "p", first_only=True)
    assert [(b.topic, b.partition, b.offset) for b in found] == [all_[17]]


def test_an_error_no_single_record_causes_isolates_nothing() -> None:
    """A failure only the whole set shows (an aggregate over many records) finds no bad record: the
    executor then raises the original error instead of dropping records."""
    all_ = coords(40)
    found = isolate(all_, lambda parts: CAST if sum(m.next_offset - m.first_offset for m in parts) > 30 else None,
                    "p")
    assert found == []


def test_sub_ranges_span_the_slice_per_partition() -> None:
    parts = sub_ranges([("t", 0, 5), ("t", 0, 9), ("t", 1, 3)], "p")
    assert [(m.partition, m.first_offset, m.next_offset) for m in parts] == [(0, 5, 10), (1, 3, 4)]


class SparkError(Exception):
    """What PySpark raises for a failed task: the error's condition and parameters, told by their accessors."""

    def __init__(self, message: str, condition: str, parameters: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.condition, self.parameters = condition, parameters or {}

    def getCondition(self) -> str:
        return self.condition

    def getMessageParameters(self) -> dict[str, str]:
        return self.parameters


def test_record_error_tells_record_errors_from_transient_ones() -> None:
    cast = SparkError("[CAST_INVALID_INPUT] The value 'x' cannot be cast", "CAST_INVALID_INPUT")
    assert record_error(cast) == RecordError(
        Stage.TRANSFORM, "CAST_INVALID_INPUT", "SparkError: [CAST_INVALID_INPUT] The value 'x' cannot be cast")
    assert record_error(RuntimeError("[CAST_INVALID_INPUT] in a message only")) is None  # text is no type
    raised = SparkError("[USER_RAISED_EXCEPTION] TRIDENT_NULL_KEY: sink s, key user SQLSTATE: P0001",
                        "USER_RAISED_EXCEPTION", {"errorMessage": "TRIDENT_NULL_KEY: sink s, key user"})
    err = record_error(raised)
    assert err is not None
    assert err.stage is Stage.AGGREGATE
    assert err.reason == "NULL_KEY"
    assert err.message == "null group-by key (sink s, key user)"
    assert record_error(RuntimeError("[USER_RAISED_EXCEPTION] TRIDENT_NULL_KEY: in a message only")) is None
    assert record_error(RuntimeError('KafkaError{code=_TRANSPORT,val=-195,str="broker down"}')) is None
    assert record_error(ConnectionError("Cassandra is away")) is None


def bad(offset: int, stage: Stage = Stage.DECODE) -> BadRecord:
    return BadRecord("t", 0, offset, stage, "json_invalid", "Expecting value")


def test_policy_needs_a_topic_exactly_for_dead_letters() -> None:
    assert ErrorPolicy().action is Action.FAIL
    assert ErrorPolicy.dead_letter("dlq").describe() == {"dead_letter": {"topic": "dlq"}}
    with pytest.raises(ValueError):
        ErrorPolicy(Action.DEAD_LETTER)
    with pytest.raises(ValueError):
        ErrorPolicy(Action.SKIP, "dlq")


def test_skip_counts_by_stage_and_reason_once_per_txid(caplog: Any) -> None:
    metrics = Metrics(CollectorRegistry())
    handler = BadRecordHandler("p", ErrorPolicy.skip(), metrics)
    records = [bad(o) for o in range(5)] + [bad(9, Stage.TRANSFORM)]
    handler.settle(7, records, progress=None)  # type: ignore[arg-type]
    handler.settle(7, records, progress=None)  # type: ignore[arg-type]  # a replay of the same txid
    assert metrics.value("trident_bad_records_total", pipeline="p", stage="decode", reason="json_invalid",
                         action="skip") == 5
    assert metrics.value("trident_bad_records_total", pipeline="p", stage="transform", reason="json_invalid",
                         action="skip") == 1
    assert "skipped 6 bad records (decode json_invalid 5, transform json_invalid 1); first t[0]@0" in caplog.text


def test_fail_raises_naming_the_first_record_and_the_policy_stops_with_exit_1() -> None:
    metrics = Metrics(CollectorRegistry())
    handler = BadRecordHandler("p", ErrorPolicy(), metrics)
    with pytest.raises(BadRecordError) as raised:
        handler.settle(3, [bad(8), bad(4)], progress=None)  # type: ignore[arg-type]
    assert "t[0]@4" in str(raised.value)
    decision = FailurePolicy().decide(Failure(raised.value, txid=3, attempt=1))
    assert decision.permanent
    assert decision.exit_code == FAILED
    assert "t[0]@4" in decision.reason


def test_in_order_keeps_one_entry_per_source_record() -> None:
    assert [b.offset for b in in_order([bad(5), bad(2), bad(5, Stage.TRANSFORM)])] == [2, 5]


def test_dead_letter_headers_name_the_source_and_keep_the_records_own() -> None:
    record = Record("orders", 2, 41, b"k", b"v", 1_700_000_000_000, (("trace", b"abc"),))
    headers = letter_headers("p", record, BadRecord("orders", 2, 41, Stage.TRANSFORM, "DIVIDE_BY_ZERO", "by zero"))
    assert headers[0] == ("trace", b"abc")
    h = dict(headers)
    assert h["trident.source.timestamp"] == b"1700000000000"
    assert h["trident.error.class"] == b"DIVIDE_BY_ZERO"
    assert coordinates_of(headers) == ("p", ("orders", 2, 41))
    assert coordinates_of([("other", b"x")]) == (None, None)


@pytest.mark.parametrize(("errors", "policy"), [
    (None, ErrorPolicy()),
    ("skip", ErrorPolicy.skip()),
    ({"dead_letter": {"topic": "sales-dead-letters"}}, ErrorPolicy.dead_letter("sales-dead-letters")),
])
def test_errors_in_the_config_compile_to_the_topologys_policy(errors: Any, policy: ErrorPolicy) -> None:
    from app.config import compile_pipeline, parse
    from app.config.compile import describe
    from tests.service.test_config import doc

    config = parse(doc(pipelines__0__errors=errors) if errors is not None else doc(), {})
    compiled = compile_pipeline(config, config.pipelines[0])
    assert compiled.topology.errors == policy
    assert describe(compiled.topology, compiled.coordinator)["errors"] == policy.describe()


@pytest.mark.parametrize("errors", ["ignore", {"dead_letter": {}}, {"dead_letter": {"topic": "bad topic!"}},
                                    {"skip": {}}])
def test_a_bad_errors_setting_is_refused_at_its_path(errors: Any) -> None:
    from app.config import parse
    from app.config.errors import ConfigError
    from tests.service.test_config import doc

    with pytest.raises(ConfigError) as e:
        parse(doc(pipelines__0__errors=errors), {})
    assert "pipelines[0].errors" in str(e.value)
