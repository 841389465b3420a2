"""What bad records cost in Spark jobs: null group-by keys are left out by the job that meets them (or, where
a record may yield several rows, checked once per key and their records found by one more job, only in a
txid that has them), and transform errors are found in a number of jobs that does not grow with the number
of bad records."""

from __future__ import annotations

import json
import math
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from app.bad_records.error_policy import ErrorPolicy
from app.metrics import Metrics
from app.spark import SparkExecutor, bad_record_finding
from app.topology.topology import Agg, Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count, Sum
from states.factory import StateFactory
from tests.kafka.helpers import Produced, config, produce
from tests.spark.helpers import coordinator, sqlite_table

ONE_TXID = Caps(per_partition=10_000, per_batch=10_000)
STORES = ("berlin", "paris", "oslo")


@dataclass
class Orders:
    """A topic of JSON orders; ``bad`` maps the coordinates of each bad record to its reason."""

    topic: str
    produced: list[Produced]
    bad: dict[tuple[str, int, int], str]

    def truth(self) -> dict[str, tuple[int, int]]:
        """Per store, the total amount and the number of orders over the good records (from the input)."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.produced:
            if (r.topic, r.partition, r.offset) in self.bad:
                continue
            doc = json.loads(r.value)
            total, n = out.get(doc["store"], (0, 0))
            out[doc["store"]] = (total + int(doc["amount"]), n + 1)
        return out


def orders(cluster: Any, n: int, bad: dict[bytes, str], every: int, seed: int) -> Orders:
    """``n`` orders on 2 partitions; about one in ``every`` is one of ``bad``'s values (by turns)."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    rng = random.Random(seed)
    poison = list(bad)
    values: list[tuple[int, bytes]] = []
    for i in range(n):
        if poison and rng.randrange(every) == 0:
            values.append((i % 2, poison[len(values) % len(poison)]))
        else:
            values.append((i % 2, json.dumps({"store": rng.choice(STORES), "amount": rng.randint(1, 99)}).encode()))
    produced = produce(cluster.bootstrap_servers(), topic, values)
    found = {(r.topic, r.partition, r.offset): bad[r.value] for r in produced if r.value in bad}
    return Orders(topic, produced, found)


def sales_by_store(name: str, data: Orders, cluster: Any, factory: StateFactory, amount_sql: str) -> Topology:
    t = Topology(name, errors=ErrorPolicy.skip())
    (t.new_stream(KafkaSpout(config(cluster.bootstrap_servers(), topics=[data.topic]), name))
     .map("get_json_object(CAST(value AS STRING), '$.store') AS store",
          f"{amount_sql} AS amount")
     .group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    return t


def exploded_sales_by_store(name: str, data: Orders, cluster: Any, factory: StateFactory) -> Topology:
    """:func:`sales_by_store` through a generator (one row per order still, but Spark cannot know it)."""
    t = Topology(name, errors=ErrorPolicy.skip())
    (t.new_stream(KafkaSpout(config(cluster.bootstrap_servers(), topics=[data.topic]), name))
     .map("explode(array(get_json_object(CAST(value AS STRING), '$.store'))) AS store",
          "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount")
     .group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    return t


def jobs_of(spark: Any, group: str) -> list[Any]:
    tracker = spark.sparkContext.statusTracker()
    return [tracker.getJobInfo(j) for j in sorted(tracker.getJobIdsForGroup(group))]


def run_one_txid(spark: Any, t: Topology, factory: StateFactory, metrics: Metrics,
                 driver_keys: int | None = None) -> list[Any]:
    """Run ``t``'s one txid; returns what its executor processed (the txid's results)."""
    executor = SparkExecutor(spark, t, metrics=metrics, driver_keys=driver_keys)
    processed = _keeping(executor)
    coord = coordinator(t, executor, factory.txstate_store(t.name), caps=ONE_TXID, metrics=metrics)
    try:
        assert coord.run_until_idle() == 1
    finally:
        coord.close()
    return processed


def test_null_keys_are_left_out_by_the_process_job_itself(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Orders without a store (a null group-by key) are left out and reported with their coordinates by
    the process job: the txid runs one job (its process job, which collects the result of a txid this small:
    the commit needs none), none failed; the state equals the truth over the other orders and each null-key
    record is counted once."""
    data = orders(spark_kafka, 600, {b'{"amount": 5}': "NULL_KEY"}, every=25, seed=11)
    assert len(data.bad) >= 10
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"null-keys-{uuid.uuid4().hex[:6]}"
    t = sales_by_store(name, data, spark_kafka, factory,
                       "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)")
    run_one_txid(spark, t, factory, metrics)
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="aggregate", reason="NULL_KEY",
                         action="skip") == len(data.bad)
    jobs = jobs_of(spark, f"{name}:txid-1")
    assert [j.status for j in jobs] == ["SUCCEEDED"], jobs


@pytest.mark.parametrize("generator", [False, True], ids=["a-row-per-record", "a-generator"])
def test_a_result_cached_and_collected_by_one_job_still_names_its_null_key_records(
        spark: Any, spark_kafka: Any, tmp_path: Path, generator: bool) -> None:
    """The first txid of 600 orders with a driver-commit threshold of 500: its keys are unsure (no txid before
    it), so its process job caches the result and collects it, holding fewer than 500 keys (the stores). The
    observations that name null-key records are read from that cached plan: each null-key record is reported
    once and the state equals the truth over the others, whether the keys are checked on every row (one job: the
    process job, the commit on the driver) or per key (a generator: the job that finds the records and the run
    without them follow)."""
    data = orders(spark_kafka, 600, {b'{"amount": 5}': "NULL_KEY"}, every=25, seed=17)
    assert len(data.bad) >= 10
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"bounded-{'gen' if generator else 'row'}-{uuid.uuid4().hex[:6]}"
    t = exploded_sales_by_store(name, data, spark_kafka, factory) if generator else \
        sales_by_store(name, data, spark_kafka, factory, "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)")
    collected = run_one_txid(spark, t, factory, metrics, driver_keys=500)
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="aggregate", reason="NULL_KEY",
                         action="skip") == len(data.bad)
    assert [r.collected is not None and r.frame is not None for r in collected[0].sinks] == [True]
    assert len(jobs_of(spark, f"{name}:txid-1")) == (3 if generator else 1)


def _observations(plan: Any) -> dict[str, bool]:
    """Per observation (``CollectMetrics`` node) of a logical plan: whether an aggregate is below it."""
    def below(node: Any, kind: str) -> bool:
        kids = node.children()
        return any(kids.apply(i).getClass().getSimpleName() == kind or below(kids.apply(i), kind)
                   for i in range(kids.size()))

    found: dict[str, bool] = {}
    todo = [plan]
    while todo:
        node = todo.pop()
        if node.getClass().getSimpleName() == "CollectMetrics":
            found[str(node.name())] = below(node, "Aggregate")
        kids = node.children()
        todo += [kids.apply(i) for i in range(kids.size())]
    return found


def _keeping(executor: SparkExecutor) -> list[Any]:
    """What ``executor`` processes from now on, in order (each txid's results, their frames' plans)."""
    processed: list[Any] = []
    process = executor.process

    def keep(*args: Any, **kwargs: Any) -> Any:
        processed.append(process(*args, **kwargs))
        return processed[-1]

    executor.process = keep  # type: ignore[method-assign]  # the test keeps what the executor processed
    return processed


def test_a_sink_that_met_bad_keys_checks_every_row_until_its_txids_are_clean(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Four txids of 200 orders through a generator: null keys in the first two, none in the last two; after a
    txid with a bad key the sinks check every row for one clean txid here (``rows_checked_txids`` 1). The
    first txid checks per key and finds the records by one more job (4 jobs: process, that one, the run
    without those records, commit); the second checks every row and finds them in its process job
    (3 jobs); the third, clean, still checks every row; the fourth checks per key again. The state equals
    the truth and each null-key record is counted once."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    spark_kafka.create_topic(topic, 2)
    rng = random.Random(13)
    values = []
    for txid in range(4):
        for i in range(200):
            doc = {"amount": rng.randint(1, 99)} if txid < 2 and i % 20 == 7 else \
                {"store": rng.choice(STORES), "amount": rng.randint(1, 99)}
            values.append((i % 2, json.dumps(doc).encode()))
    produced = produce(spark_kafka.bootstrap_servers(), topic, values)
    data = Orders(topic, produced, {(r.topic, r.partition, r.offset): "NULL_KEY" for r in produced
                                    if b"store" not in r.value})
    assert len(data.bad) == 20
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"rows-checked-{uuid.uuid4().hex[:6]}"
    t = exploded_sales_by_store(name, data, spark_kafka, factory)
    executor = SparkExecutor(spark, t, metrics=metrics, driver_keys=0)  # results cached: their plans are kept
    assert executor.reads.planned == ("value",)  # the first txid's process job reads no coordinates
    executor.runs.rows_checked_txids = 1
    processed = _keeping(executor)
    coord = coordinator(t, executor, factory.txstate_store(t.name), caps=Caps(per_partition=100, per_batch=200),
                        metrics=metrics)
    try:
        assert coord.run_until_idle() == 4
    finally:
        coord.close()
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="aggregate", reason="NULL_KEY",
                         action="skip") == len(data.bad)
    checks = [set(_observations(p.sinks[0].frame._jdf.queryExecution().analyzed())) for p in processed]
    assert [("bad_keys_sales" in c, "null_keys_sales" in c) for c in checks] == \
        [(True, False), (False, True), (False, True), (True, False)], checks
    assert [len(jobs_of(spark, f"{name}:txid-{txid}")) for txid in range(1, 5)] == [4, 3, 2, 2]


def test_keys_are_checked_on_the_aggregate_rows_and_a_clean_txid_runs_two_jobs(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A clean txid through a generator: the check of keys the state cannot store observes the aggregate's
    rows (one per key, not one per row: that observation cost about a fifth of the process job's CPU), no
    observation of null keys runs on the rows, and the txid runs two jobs; the state equals the truth."""
    data = orders(spark_kafka, 300, {}, every=25, seed=12)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"clean-keys-{uuid.uuid4().hex[:6]}"
    t = exploded_sales_by_store(name, data, spark_kafka, factory)
    processed = run_one_txid(spark, t, factory, metrics, driver_keys=0)  # the result cached: its plan is kept
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    frame = processed[0].sinks[0].frame
    observations = _observations(frame._jdf.queryExecution().analyzed())
    assert observations.get("bad_keys_sales") is True, observations
    assert not any(n.startswith("null_keys_") for n in observations), observations
    assert len(jobs_of(spark, f"{name}:txid-1")) == 2


@pytest.mark.parametrize("bad_records", [1, 10, 50])
def test_transform_errors_cost_a_few_jobs_whatever_their_number(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                                bad_records: int) -> None:
    """Amounts that do not CAST, divide by zero or hit a raise_error, 1 to 50 of them in a txid of 600:
    the txid runs the same few jobs (the process job in the error-capturing form, a read of the failed
    records per failing expression; the commit runs none: the process job collected the result), far fewer
    than 2*log2(600); none fails (no task fails,
    so none is retried); the state equals the truth over the good records and each
    bad record is counted once under its own error."""
    poison = {b'{"store": "oslo", "amount": "lots"}': "CAST_INVALID_INPUT",
              b'{"store": "oslo", "amount": "0"}': "DIVIDE_BY_ZERO",
              b'{"store": "oslo", "amount": "-7"}': "USER_RAISED_EXCEPTION"}
    data = orders(spark_kafka, 600, poison, every=600 // bad_records, seed=bad_records)
    poison_values = set(poison)
    while len(data.bad) != bad_records:  # the seed draws about the right number; take the first that fits
        data = orders(spark_kafka, 600, poison, every=600 // bad_records, seed=len(data.produced) + len(data.bad))
    assert {v for r in data.produced for v in [r.value] if v in poison_values}
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"transform-errors-{uuid.uuid4().hex[:6]}"
    amount = "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)"
    t = sales_by_store(name, data, spark_kafka, factory,
                       f"CASE WHEN {amount} < 0 THEN raise_error('negative amount') ELSE 100 DIV {amount} END")
    truth = {s: (sum(100 // int(json.loads(r.value)["amount"]) for r in data.produced
                     if (r.topic, r.partition, r.offset) not in data.bad and json.loads(r.value)["store"] == s), n)
             for s, (_, n) in data.truth().items()}
    run_one_txid(spark, t, factory, metrics)
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == truth
    for reason in poison.values():
        expected = sum(1 for r in data.bad.values() if r == reason)
        assert metrics.value("trident_bad_records_total", pipeline=name, stage="transform", reason=reason,
                             action="skip") == expected, reason
    jobs = jobs_of(spark, f"{name}:txid-1")
    failing_expressions = 1  # every poison fails the same expression (the amount's)
    assert len(jobs) == 1 + failing_expressions, jobs
    assert [j.status for j in jobs].count("FAILED") == 0, jobs
    assert len(jobs) < 2 * math.log2(len(data.produced))


class Killed(BaseException):
    """The process dies here (not an Exception: the coordinator does not retry it)."""


def test_a_restart_reuses_the_bad_records_isolated_before_it(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """The process is killed after txid 1's transform errors were isolated and its plan frozen, before its
    commit; a new executor and coordinator on the same store run txid 1 again without isolating anything
    (two jobs, process and commit, none failed: a replay caches its result); the state equals the truth and every bad record is
    counted once, by the attempt that committed."""
    poison = {b'{"store": "oslo", "amount": "lots"}': "CAST_INVALID_INPUT"}
    data = orders(spark_kafka, 400, poison, every=40, seed=5)
    assert len(data.bad) >= 5
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    name = f"isolated-restart-{uuid.uuid4().hex[:6]}"
    t = sales_by_store(name, data, spark_kafka, factory,
                       "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)")

    def kill_before_commit(point: str, txid: int) -> None:
        if point == "commit":
            raise Killed

    first = coordinator(t, SparkExecutor(spark, t, metrics=Metrics(CollectorRegistry())),
                        factory.txstate_store(t.name), caps=ONE_TXID)
    first._faults = kill_before_commit
    try:
        with pytest.raises(Killed):
            first.run_until_idle()
    finally:
        first.close()
    before = jobs_of(spark, f"{name}:txid-1")
    # the first process job found the bad records, the next named their errors: the isolation to reuse
    assert [j.status for j in before] == ["SUCCEEDED", "SUCCEEDED"], before
    metrics = Metrics(CollectorRegistry())
    run_one_txid(spark, t, factory, metrics)
    after = [j for j in jobs_of(spark, f"{name}:txid-1") if j.jobId not in {b.jobId for b in before}]
    assert [j.status for j in after] == ["SUCCEEDED", "SUCCEEDED"], after  # process, commit: no isolation
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="transform", reason="CAST_INVALID_INPUT",
                         action="skip") == len(data.bad)


def test_isolation_says_what_it_does_in_a_few_lines_and_on_readyz(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                                  caplog: Any, capfd: Any) -> None:
    """While a txid's transform errors are isolated, the coordinator's health reason says so; the log has
    one start line, one line per round and one summary naming the first bad records (at DEBUG while it is quick,
app.spark.isolation_report); the rounds and jobs
    are counted; Spark prints no task stack trace (no task fails)."""
    poison = {b'{"store": "oslo", "amount": "lots"}': "CAST_INVALID_INPUT"}
    data = orders(spark_kafka, 400, poison, every=20, seed=8)
    assert len(data.bad) >= 10
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"isolation-visible-{uuid.uuid4().hex[:6]}"
    t = sales_by_store(name, data, spark_kafka, factory,
                       "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)")
    executor = SparkExecutor(spark, t, metrics=metrics)
    coord = coordinator(t, executor, factory.txstate_store(t.name), caps=ONE_TXID, metrics=metrics)
    reasons: list[str | None] = []
    errors_at = executor.isolation._errors_at

    def watched(*args: Any) -> Any:
        reasons.append(coord.source_problem)
        return errors_at(*args)

    setattr(executor.isolation, "_errors_at", watched)  # noqa: B010 - watch the naming round
    capfd.readouterr()
    caplog.set_level("DEBUG", logger="app.spark.isolation_report")  # INFO only when isolation is slow
    try:
        assert coord.run_until_idle() == 1
    finally:
        coord.close()
    assert reasons
    assert all(r is not None and r.startswith("isolating bad records in txid 1: transform") for r in reasons)
    assert coord.source_problem is None
    lines = [r.getMessage() for r in caplog.records if r.name == "app.spark.isolation_report"]
    assert len(lines) == 5, lines  # start, the capturing round, the naming round, the summary, the first records
    assert "isolating bad records (transform stage, 400 records)" in lines[0]
    first = min(data.bad)
    assert f"isolated {len(data.bad)} bad records of 400" in lines[-2]
    assert f"{first[0]}[{first[1]}]@{first[2]} CAST_INVALID_INPUT" in lines[-1]
    assert metrics.value("trident_isolation_rounds_total", pipeline=name, stage="transform") == 2
    assert metrics.value("trident_isolated_records_total", pipeline=name, stage="transform") == len(data.bad)
    assert capfd.readouterr().err.count("Exception in task") == 0


def test_a_record_with_a_null_key_in_one_sink_is_left_out_of_every_sink(spark: Any, spark_kafka: Any,
                                                                         tmp_path: Path) -> None:
    """Two sinks of one spout: orders per store (a record without a store has a null key there) and the
    amount per amount bucket (that record has a key there): a record is bad if any of its rows is, so
    neither table counts it; each is counted once as a null-key record."""
    data = orders(spark_kafka, 300, {b'{"amount": 5}': "NULL_KEY"}, every=30, seed=21)
    assert len(data.bad) >= 3
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"null-keys-two-sinks-{uuid.uuid4().hex[:6]}"
    t = Topology(name, errors=ErrorPolicy.skip())
    spout = KafkaSpout(config(spark_kafka.bootstrap_servers(), topics=[data.topic]), name)
    rows = t.new_stream(spout).map("get_json_object(CAST(value AS STRING), '$.store') AS store",
                                   "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount")
    rows.group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                                name="sales")
    rows.each("amount % 10 AS bucket").group_by("bucket").persistent_aggregate(factory, [Agg(Count(), "n")],
                                                                               name="buckets")
    run_one_txid(spark, t, factory, metrics)
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    buckets: dict[int, int] = {}
    for r in data.produced:
        if (r.topic, r.partition, r.offset) not in data.bad:
            b = int(json.loads(r.value)["amount"]) % 10
            buckets[b] = buckets.get(b, 0) + 1
    assert sqlite_table(tmp_path / "state.db", "buckets", ["bucket"], ["n"]) == buckets
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="aggregate", reason="NULL_KEY",
                         action="skip") == len(data.bad)


def test_a_function_transform_falls_back_to_bisection(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A Python function transform cannot run in the error-capturing form: its sink's transform errors are
    found by bisection, counted as probes; the state equals the truth and each bad record is counted."""
    poison = {b'{"store": "oslo", "amount": "lots"}': "CAST_INVALID_INPUT"}
    data = orders(spark_kafka, 200, poison, every=50, seed=4)
    assert 1 <= len(data.bad) <= 10
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"bisection-{uuid.uuid4().hex[:6]}"
    t = Topology(name, errors=ErrorPolicy.skip())
    spout = KafkaSpout(config(spark_kafka.bootstrap_servers(), topics=[data.topic]), name)
    (t.new_stream(spout)
     .map("get_json_object(CAST(value AS STRING), '$.store') AS store",
          "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount")
     .apply(lambda df: df.withColumn("amount", df["amount"] * 1))
     .group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    run_one_txid(spark, t, factory, metrics)
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="transform", reason="CAST_INVALID_INPUT",
                         action="skip") == len(data.bad)
    assert metrics.value("trident_isolation_probes_total", pipeline=name, stage="transform") > 0
    assert metrics.value("trident_isolated_records_total", pipeline=name, stage="transform") == len(data.bad)


def test_a_generator_in_a_map_falls_back_to_bisection(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A map with ``explode`` cannot be evaluated in the error-capturing form (Spark refuses a generator inside
    an expression): its transform errors are found by bisection, and the state equals the truth."""
    poison = {b'{"store": "oslo", "amount": "lots"}': "CAST_INVALID_INPUT"}
    data = orders(spark_kafka, 200, poison, every=50, seed=5)
    assert 1 <= len(data.bad) <= 10
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"generator-{uuid.uuid4().hex[:6]}"
    t = Topology(name, errors=ErrorPolicy.skip())
    spout = KafkaSpout(config(spark_kafka.bootstrap_servers(), topics=[data.topic]), name)
    (t.new_stream(spout)
     .map("explode(array(get_json_object(CAST(value AS STRING), '$.store'))) AS store",
          "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount")
     .group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    run_one_txid(spark, t, factory, metrics)
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="transform", reason="CAST_INVALID_INPUT",
                         action="skip") == len(data.bad)
    assert metrics.value("trident_isolation_probes_total", pipeline=name, stage="transform") > 0


def test_a_failure_between_the_process_job_and_the_search_for_bad_keys_replays_the_txid_exactly(
        spark: Any, spark_kafka: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator sink's keys are checked on the aggregate; its process job met null keys, and the job that
    finds their records fails (after the process job ran, before the plan is frozen). The coordinator
    replays the txid: the state equals the truth over the good orders and each null-key record is counted
    once, by the attempt that committed."""
    data = orders(spark_kafka, 400, {b'{"amount": 5}': "NULL_KEY"}, every=25, seed=17)
    assert len(data.bad) >= 5
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"finder-fails-{uuid.uuid4().hex[:6]}"
    t = exploded_sales_by_store(name, data, spark_kafka, factory)
    find = bad_record_finding.bad_key_records
    calls: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            msg = "the executor lost between the process job and the search for bad keys"
            raise RuntimeError(msg)
        return find(*args, **kwargs)

    monkeypatch.setattr(bad_record_finding, "bad_key_records", failing_once)
    run_one_txid(spark, t, factory, metrics)
    assert len(calls) == 2  # the failed search, then the replay's
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == data.truth()
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="aggregate", reason="NULL_KEY",
                         action="skip") == len(data.bad)
    assert metrics.value("trident_batch_replays_total", pipeline=name) == 1
