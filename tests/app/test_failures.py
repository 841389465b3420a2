"""Failure classes: the policy's decisions, and what the coordinator does with them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException

from app.commands import common
from app.coordinator.coordinator import Coordinator
from app.coordinator.loop import Outcome
from app.failures import spark_fatal as fatal
from app.failures.policy import BAD_INPUT, FAILED, Failure, FailureClass, FailurePolicy
from app.topology.local import LocalExecutor
from spouts.errors import AccessRefusedError, DataLossError, PartitionUnavailableError
from spouts.memory import MemoryEmitter, MemorySpout
from spouts.metadata import Partition
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.errors import SchemaMismatchError, StaleBatchError
from states.spec import StateKind
from tests.app.harness import TOPIC, World

P0 = Partition(TOPIC, 0)


def kafka_error(conf: dict[str, str]) -> KafkaException:
    """The exception librdkafka really raises for ``conf`` (made by a real client, no broker needed)."""
    try:
        Consumer({"group.id": "g", **conf}).list_topics(timeout=0.5)
    except KafkaException as e:
        return e
    raise AssertionError(f"{conf} raised nothing")


class SparkLikeError(Exception):
    """What PySpark raises on the driver: the task's error class, with the message only as text."""

    def __init__(self, message: str, error_class: str | None) -> None:
        super().__init__(message)
        self._error_class = error_class

    def getErrorClass(self) -> str | None:
        return self._error_class


def decide(error: BaseException, **context: Any) -> Any:
    return FailurePolicy(retry_backoff_s=(1.0, 8.0), outage_limit_s=600.0).decide(
        Failure(error, txid=7, attempt=context.pop("attempt", 1), **context))


class TestPolicy:
    def test_exit_codes_are_the_commands(self) -> None:
        assert (FAILED, BAD_INPUT) == (common.FAILED, common.BAD_INPUT)

    def test_an_unknown_librdkafka_property_is_permanent_and_named(self) -> None:
        d = decide(kafka_error({"bootstrap.servers": "127.0.0.1:1", "no.such.property": "1"}))
        assert d.permanent
        assert d.exit_code == BAD_INPUT
        assert "no.such.property" in d.reason

    @pytest.mark.parametrize("error", [
        DataLossError(P0, 2, 5), StaleBatchError(3, 4, ("k",)),
    ])
    def test_protocol_errors_are_permanent_with_exit_1(self, error: Exception) -> None:
        d = decide(error)
        assert d.permanent
        assert d.exit_code == FAILED
        assert type(error).__name__ in d.reason

    def test_a_schema_mismatch_is_a_configuration_error(self) -> None:
        d = decide(SchemaMismatchError("table trident.trident_state has columns (k, v), expected (word, count)"))
        assert d.permanent
        assert d.exit_code == BAD_INPUT
        assert "trident_state" in d.reason

    def test_an_error_s_text_decides_nothing(self) -> None:
        """A state error's name in a message (a traceback from a Spark task) is no class: transient. Tasks carry
        the state's configuration errors as data (app.failures.spark_fatal), so the driver raises the class itself."""
        text = ("An exception was thrown from the Python worker. Traceback (most recent call last):\n"
                "states.errors.SchemaMismatchError: table 'trident_state' has no column 'word'\n")
        assert not decide(RuntimeError(text)).permanent
        carried = fatal.decode(fatal.encode(SchemaMismatchError("table 'trident_state' has no column 'word'")))
        d = decide(carried)
        assert type(carried) is SchemaMismatchError
        assert d.permanent
        assert d.exit_code == BAD_INPUT
        assert d.reason == "state table: SchemaMismatchError: table 'trident_state' has no column 'word'"

    def test_refused_credentials_are_permanent(self) -> None:
        from cassandra import AuthenticationFailed
        from cassandra.cluster import NoHostAvailable
        from confluent_kafka import KafkaError

        cassandra = NoHostAvailable("Unable to connect to any servers",
                                    {"10.0.0.1:9042": AuthenticationFailed("Bad credentials")})
        kafka = KafkaException(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad password"))
        for error in (cassandra, kafka):
            d = decide(error)
            assert d.permanent
            assert d.exit_code == BAD_INPUT
            assert d.reason.startswith("authentication refused")

    def test_a_missing_acl_or_grant_is_an_authorization_refusal(self) -> None:
        from cassandra import Unauthorized
        from confluent_kafka import KafkaError

        kafka = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"))
        cassandra = Unauthorized('Error from server: code=2100 [Unauthorized] message="User trident has no MODIFY '
                                 'permission on <table ks.counts> or any of its parents"')
        for error in (kafka, cassandra):
            d = decide(error)
            assert d.permanent
            assert d.exit_code == BAD_INPUT
            assert d.cause == "authorization"
            assert d.reason.startswith("authorization refused"), d.reason
        assert "check the grants of the role" in decide(cassandra).reason

    def test_an_untrusted_cassandra_certificate_is_a_tls_refusal_naming_the_setting(self) -> None:
        import ssl

        from cassandra.cluster import NoHostAvailable

        bad = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
        d = decide(NoHostAvailable("Unable to connect to any servers", {"10.0.0.1:9042": bad}))
        assert d.permanent
        assert d.exit_code == BAD_INPUT
        assert d.cause == "tls"
        assert d.reason.startswith("TLS refused by Cassandra at 10.0.0.1:9042")
        assert "cassandra.tls.ca_file" in d.reason

    def test_one_host_away_among_refusals_is_no_refusal(self) -> None:
        from cassandra import AuthenticationFailed
        from cassandra.cluster import NoHostAvailable

        mixed = NoHostAvailable("Unable to connect to any servers", {"a:9042": AuthenticationFailed("Bad credentials"),
                                                                     "b:9042": ConnectionRefusedError(111, "refused")})
        assert not decide(mixed).permanent

    @pytest.mark.parametrize("name", ["AuthenticationFailed", "Unauthorized", "KafkaException"])
    def test_a_class_named_like_a_refusal_is_no_refusal(self, name: str) -> None:
        """Types decide: an error class that only bears the name of the driver's or librdkafka's is transient."""
        from confluent_kafka import KafkaError

        lookalike = type(name, (Exception,), {})
        d = decide(lookalike(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error")))
        assert not d.permanent
        assert d.failure_class is FailureClass.TRANSIENT

    def test_a_subclass_of_the_driver_s_refusal_is_a_refusal(self) -> None:
        """A subclass of the driver's ``Unauthorized`` (another name, same type) is still a refusal."""
        from cassandra import Unauthorized

        class MissingGrant(Unauthorized):
            pass

        d = decide(MissingGrant("User trident has no MODIFY permission on <table ks.counts>"))
        assert d.permanent
        assert d.cause == "authorization"
        assert d.exit_code == BAD_INPUT

    def test_a_fatal_librdkafka_error_and_a_bad_setting_are_told_by_their_codes(self) -> None:
        """A fatal KafkaError stops the pipeline (exit 1); an invalid argument is configuration (exit 2)."""
        from confluent_kafka import KafkaError

        fatal = decide(KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True)))
        assert fatal.permanent
        assert fatal.exit_code == FAILED
        assert fatal.cause == "kafka_fatal"
        config = decide(KafkaException(KafkaError(KafkaError._INVALID_ARG, "bad value")))
        assert config.permanent
        assert config.exit_code == BAD_INPUT
        assert config.cause == "configuration"

    def test_the_text_of_an_error_decides_nothing(self) -> None:
        """A refusal or an error class written in a message (a Spark task's traceback) is no type: transient."""
        text = ("Traceback (most recent call last):\n  ...\nspouts.errors.AccessRefusedError: authorization refused "
                "by Kafka at b:9093 for principal User:trident: topic words: Broker: Topic authorization failed\n"
                "[DIVIDE_BY_ZERO] No such configuration property")
        for error in (SparkLikeError(text, None), RuntimeError(text)):
            d = decide(error, same_error_attempts=5)
            assert not d.permanent
            assert d.failure_class is FailureClass.TRANSIENT

    def test_an_outage_is_transient_with_capped_backoff_until_the_limit(self) -> None:
        down = PartitionUnavailableError(P0, "broker down")
        assert [decide(down, failures_in_a_row=n).retry_in_s for n in (1, 2, 3, 4, 5, 9)] == [1, 2, 4, 8, 8, 8]
        assert decide(down, failing_for_s=599).failure_class is FailureClass.TRANSIENT
        late = decide(down, failing_for_s=601)
        assert late.permanent
        assert late.exit_code == FAILED
        assert "outage limit of 600 s" in late.reason

    def test_a_deterministic_transform_error_is_permanent_once_every_attempt_fails_alike(self) -> None:
        cast = SparkLikeError("[CAST_INVALID_INPUT] The value 'x' of the type STRING cannot be cast to INT",
                              "CAST_INVALID_INPUT")
        assert not decide(cast, attempt=1, same_error_attempts=1).permanent  # could have been bad luck
        d = decide(cast, attempt=3, same_error_attempts=3)
        assert d.permanent
        assert d.exit_code == FAILED
        assert "CAST_INVALID_INPUT" in d.reason
        assert "txid 7" in d.reason

    def test_the_error_class_is_read_from_the_jvm_exception_behind_a_wrapped_error(self) -> None:
        """PySpark keeps the JVM exception it captured: its causes' conditions count, read by their accessor."""
        class JavaThrowable:  # a py4j handle: a SparkThrowable has getCondition, any Throwable getCause
            def __init__(self, condition: str | None, cause: JavaThrowable | None) -> None:
                self.condition, self.cause = condition, cause

            def getCondition(self) -> str:
                if self.condition is None:
                    raise AttributeError("not a SparkThrowable")
                return self.condition

            def getCause(self) -> JavaThrowable | None:
                return self.cause

        captured = SparkLikeError("Job aborted due to stage failure", None)
        captured._origin = JavaThrowable(None, JavaThrowable("DIVIDE_BY_ZERO", None))  # type: ignore[attr-defined]  # where PySpark keeps it
        wrapped = RuntimeError("the commit failed")
        wrapped.__cause__ = captured
        assert decide(wrapped, same_error_attempts=3).permanent
        captured._origin = JavaThrowable(None, JavaThrowable("SOME_OTHER_CONDITION", None))  # type: ignore[attr-defined]  # where PySpark keeps it
        assert not decide(wrapped, same_error_attempts=3).permanent
        direct = RuntimeError("An error occurred while calling o42.count")  # py4j's Py4JJavaError keeps it here
        direct.java_exception = JavaThrowable(None, JavaThrowable("CAST_INVALID_INPUT", None))  # type: ignore[attr-defined]  # where py4j keeps it
        assert decide(direct, same_error_attempts=3).permanent

    def test_an_unknown_error_is_transient(self) -> None:
        assert decide(ConnectionResetError("peer reset")).failure_class is FailureClass.TRANSIENT


class TestCoordinatorFailures:
    def test_the_retry_log_counts_attempts_of_a_txid_that_fails_while_planning(
            self, caplog: pytest.LogCaptureFixture) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.append(0, "a")
        partitions = world.coordinator._partitions

        def away() -> list[Partition]:
            raise ConnectionError("metadata request timed out")

        real, partitions.partitions = partitions.partitions, away  # type: ignore[method-assign]  # a fault planted
        caplog.set_level(logging.WARNING, logger="app.coordinator")
        for attempt in (1, 2, 3):
            assert world.coordinator.step() == "failed"
            assert f"txid 1 attempt {attempt} failed" in caplog.records[-1].getMessage()
        degraded = world.coordinator.degraded
        assert degraded is not None
        assert degraded.failures == 3
        assert "metadata request timed out" in degraded.reason
        partitions.partitions = real  # type: ignore[method-assign]  # the fault taken out
        assert world.coordinator.step() == "committed"
        assert world.coordinator.degraded is None
        assert world.stored_counts() == world.truth() == {"a": 1}

    def test_a_transactional_spout_says_it_is_stalled(self, caplog: pytest.LogCaptureFixture) -> None:
        world = World(SpoutKind.TRANSACTIONAL, StateKind.OPAQUE, partitions=2)
        world.append(0, "a")
        world.source.set_available(Partition(TOPIC, 1), False)
        caplog.set_level(logging.WARNING, logger="app.coordinator")
        assert world.coordinator.step() == "failed"
        degraded = world.coordinator.degraded
        assert degraded is not None
        assert degraded.reason.startswith("transactional spout stalled: txid 1")
        assert "events:1" in degraded.reason
        assert "transactional spout stalled" in caplog.text
        world.heal()
        assert world.coordinator.step() == "committed"
        assert world.coordinator.degraded is None

    def test_a_permanent_error_stops_the_coordinator_at_once_with_its_decision(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.append(0, "a")
        error = kafka_error({"bootstrap.servers": "127.0.0.1:1", "no.such.property": "1"})

        def misconfigured() -> list[Partition]:
            raise error

        world.coordinator._partitions.partitions = misconfigured  # type: ignore[method-assign]  # a fault planted
        with pytest.raises(KafkaException):
            world.coordinator.step()
        stopped = world.coordinator.stopped_by
        assert stopped is not None
        assert stopped.exit_code == BAD_INPUT
        assert "no.such.property" in stopped.reason


class TextOnlyErrors(LocalExecutor):
    """Like Spark: an error in a task reaches the driver as a generic exception carrying only the text."""

    def process(self, batch: Any) -> Any:
        try:
            return super().process(batch)
        except Exception as e:  # noqa: BLE001 - every error crosses as text, like a Python worker's
            raise RuntimeError(f"Python worker failed: {type(e).__name__}: {e}") from None


class ReadsRefusedHere(MemorySpout):
    """A spout whose reads this principal may not make (a READ right revoked): reading raises the typed refusal."""

    arrow_schema = pa.schema([])

    def __init__(self, *args: Any, refuse: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refuse, self.reads = refuse, 0

    refused_topics: frozenset[str] | None = None  # None: every topic is refused (when ``refuse``)

    def read_arrow(self, meta: Any, batch_size: int = 65_536, on_bad: Any = None,
                   columns: Any = None) -> Iterator[pa.RecordBatch]:
        self.reads += 1
        if self.refuse and (self.refused_topics is None or meta.topic in self.refused_topics):
            raise AccessRefusedError("authorization", "b:9093", "User:trident", "the ACLs of User:trident",
                                     f"topic {meta.topic}: Broker: Topic authorization failed")
        yield pa.record_batch([], schema=self.arrow_schema)


class RefusedInTask(LocalExecutor):
    """Like Spark when a read task is refused: the driver gets the task's traceback as text only."""

    def process(self, batch: Any) -> Any:
        raise RuntimeError("Python worker failed: spouts.errors.AccessRefusedError: authorization refused by Kafka")


class TestErrorsThatCrossedSparkAsText:
    @staticmethod
    def world(spout_refuses: bool) -> tuple[World, ReadsRefusedHere]:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.append(0, "a")
        coord = world.coordinator
        spout = ReadsRefusedHere(world.source, SpoutKind.OPAQUE, topology_id="world", refuse=spout_refuses)
        local = coord.executor
        assert isinstance(local, LocalExecutor)
        coord.spout, coord.executor = spout, RefusedInTask(local.emitter, local.sinks)
        return world, spout

    def test_a_refusal_in_a_task_is_named_by_reading_the_range_here(self) -> None:
        """The read is asked again on the driver, where the refusal is raised with its type: exit 2 at once."""
        world, spout = self.world(spout_refuses=True)
        with pytest.raises(AccessRefusedError):
            world.coordinator.step()
        stopped = world.coordinator.stopped_by
        assert stopped is not None
        assert stopped.exit_code == BAD_INPUT
        assert stopped.cause == "authorization"
        assert spout.reads == 1

    def test_a_refusal_on_the_second_topic_of_a_batch_is_named_too(self) -> None:
        """A Read ACL missing on the second of two topics: one range of each topic is read here, so the refusal
        is typed (exit 2 at once), not retried as an outage for the outage limit."""
        world, spout = self.world(spout_refuses=True)
        second = Partition("words", 0)
        world.source.add_partition(second)
        world.source.append(second, None, b"w")
        spout.refused_topics = frozenset({"words"})
        with pytest.raises(AccessRefusedError, match="topic words"):
            world.coordinator.step()
        stopped = world.coordinator.stopped_by
        assert stopped is not None
        assert stopped.exit_code == BAD_INPUT
        assert stopped.cause == "authorization"
        assert spout.reads == 2  # one range of each topic

    def test_a_read_that_goes_through_here_leaves_the_failure_as_it_came(self) -> None:
        """Nothing typed to learn: the task's failure stays transient, and the source is asked once per txid."""
        world, spout = self.world(spout_refuses=False)
        assert [world.coordinator.step() for _ in range(3)] == ["failed"] * 3
        assert world.coordinator.stopped_by is None
        assert spout.reads == 1


class SparkLikeWorld(World):
    def new_coordinator(self) -> Coordinator:
        coord = super().new_coordinator()
        local = coord.executor
        assert isinstance(local, LocalExecutor)
        coord.executor = TextOnlyErrors(local.emitter, local.sinks)
        return coord


def frozen_then_retention(policy: DataLossPolicy, *, partial: bool) -> World:
    """txid 1 commits a,b; txid 2 is frozen on offsets [2, 5) (c d e) and crashes in its commit (after
    writing key c if ``partial``); retention then deletes offsets below 3 (c) and the process restarts."""
    world = SparkLikeWorld(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=3, per_batch=3))
    for k in "abcde":
        world.append(0, k)
    spout = world.coordinator.spout
    assert isinstance(spout, MemorySpout)
    spout.data_loss = policy
    world.coordinator._emitter = spout.emitter()
    world.source.set_visible(P0, 2)
    assert world.coordinator.step() == "committed"  # txid 1: a b
    world.source.set_visible(P0, None)
    if partial:
        world.backing.fail_after = 1  # the first key of txid 2 (c) is written, then the commit fails
    else:
        world.faults.armed = {"commit"}
    assert world.coordinator.step() == "failed"
    world.source.truncate_before(P0, 3)
    world.restart()
    spout = world.coordinator.spout
    assert isinstance(spout, MemorySpout)
    spout.data_loss = policy
    world.coordinator._emitter = spout.emitter()
    return world


def run_until_stopped_or_idle(world: World, limit: int = 20) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for _ in range(limit):
        outcomes.append(world.coordinator.step())
        if outcomes[-1] == "idle":
            return outcomes
    raise AssertionError(f"neither idle nor stopped after {limit} steps: {outcomes[-5:]}")


class TestDataLossInsideAFrozenTxid:
    def test_policy_fail_stops_with_exit_1(self) -> None:
        world = frozen_then_retention(DataLossPolicy.FAIL, partial=False)
        with pytest.raises(DataLossError, match="next offset to read is 2 but the log starts at 3"):
            run_until_stopped_or_idle(world)
        stopped = world.coordinator.stopped_by
        assert stopped is not None
        assert stopped.exit_code == FAILED
        assert "events:0" in stopped.reason

    @pytest.mark.parametrize("partial", [False, True], ids=["nothing-written", "c-written-before-the-crash"])
    def test_policy_skip_replays_what_is_left_and_counts_lost_records_at_most_once(self, partial: bool) -> None:
        world = frozen_then_retention(DataLossPolicy.SKIP, partial=partial)
        run_until_stopped_or_idle(world)
        truth = world.truth()  # every record ever appended: a b c d e once each
        lost = {"c"}
        stored = world.stored_counts()
        for key, n in truth.items():
            assert n - (1 if key in lost else 0) <= stored.get(key, 0) <= n, (key, stored)
        assert stored == ({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1} if partial else {"a": 1, "b": 1, "d": 1, "e": 1})
        emitter = world.coordinator._emitter
        assert isinstance(emitter, MemoryEmitter)
        assert emitter.lost_offsets == 1
        assert world.coordinator.committed_txid == 2
        assert world.coordinator.stopped_by is None
