"""What bad records cost: the same txid clean and with bad records, as ratios to clean in the same run.

    python -m tests.bench badrecords [--records 100000] [--repeat 3] [--rows "transform errors 1%" ...]

One txid of ``--records`` JSON sales (``{"store": ..., "amount": ...}``, declared types) on 2
partitions of a mock Kafka cluster (``--bootstrap``: a real Kafka), summed per store into SQLite
(``--state cassandra``: Cassandra, the one of CASSANDRA_CONTACT_POINTS or the CQL test server) by
``local[2]`` under ``errors: skip``: clean; with 1% decode errors (not JSON); with 1% null keys (no ``store``); with 0.1% and 1%
transform errors (``amount`` 0, which the pipeline's ``100 DIV amount`` divides by); 1% transform
errors in the txid after one that had them too (a topic that keeps carrying bad records: twice the
records, each txid half of each partition; the first txid is not timed); and the clean txid with its
transforms in the plain form (what running them in the error-capturing form costs a clean txid). Each
row is the time of the whole txid (plan, process, isolation, commit) over the clean txid's in the same
repetition, then the medians. ``--rows``: only these rows (and clean).
Goals: decode errors and null keys <= 1.3x clean, transform errors <= 3x at 0.1% and <= 5x at 1%.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack, closing
from typing import Any

from prometheus_client import CollectorRegistry

from app.bad_records.error_policy import ErrorPolicy
from app.metrics import Metrics
from app.spark import SparkExecutor, spark_session
from app.topology.topology import Agg, Topology
from spouts.kafka import KafkaSpout
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.planner import Caps
from states import Sum
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory
from tests.bench.commit_path import cassandra
from tests.bench.runs import check_counts, stored_counts
from tests.kafka.fixtures import KafkaPeer, RealKafkaPeer
from tests.kafka.helpers import config, produce
from tests.spark.helpers import coordinator

#: row -> (share of bad records, the bad value)
ROWS: dict[str, tuple[float, bytes | None]] = {
    "clean": (0.0, None),
    "clean, plain form": (0.0, None),
    "decode errors 1%": (0.01, b"{not json"),
    "null keys 1%": (0.01, b'{"amount": 5}'),
    "transform errors 0.1%": (0.001, b'{"store": "oslo", "amount": 0}'),
    "transform errors 1%": (0.01, b'{"store": "oslo", "amount": 0}'),
    "transform errors 1%, next txid": (0.01, b'{"store": "oslo", "amount": 0}'),
}
#: rows timed on the second of two txids (the first one untimed)
SECOND_TXID = {"transform errors 1%, next txid"}
#: rows whose transforms run in the plain form (what the error-capturing form costs a clean txid)
PLAIN_FORM = {"clean, plain form"}


class PlainFormExecutor(SparkExecutor):
    """The executor with its transforms in the plain form (a transform error would fail the job)."""

    def _capturable(self) -> bool:
        return False
GOALS = {"decode errors 1%": 1.3, "null keys 1%": 1.3, "transform errors 0.1%": 3.0, "transform errors 1%": 5.0}


def values(n: int, share: float, bad: bytes | None, seed: int) -> list[tuple[int, bytes]]:
    """``n`` sales on 2 partitions, ``share`` of them ``bad`` (evenly spread)."""
    rng = random.Random(seed)
    every = int(1 / share) if share else 0
    return [(i % 2, bad if every and bad is not None and i % every == every // 2 else
             json.dumps({"store": f"store-{rng.randrange(50)}", "amount": rng.randint(1, 99)}).encode())
            for i in range(n)]


def run(spark: Any, cluster: KafkaPeer, topic: str, records: int, db: str,
        second: bool = False, plain: bool = False, cql: CassandraSettings | None = None) -> tuple[float, float]:
    """Commit ``topic``'s one txid from scratch (``second``: its first txid untimed, then its second; ``plain``:
    the transforms in the plain form) into SQLite file ``db`` (``cql``: into Cassandra); (seconds, bad
    records counted in the timed txid)."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    factory = (StateFactory(backend="sqlite", sqlite_path=db) if cql is None
               else StateFactory(backend="cassandra", cassandra=cql))
    t = Topology(name, errors=ErrorPolicy.skip())
    spout = KafkaSpout(config(cluster.bootstrap_servers(), topics=[topic],
                              value_format={"type": "json", "fields": {"store": "string", "amount": "bigint"}}), name)
    (t.new_stream(spout).map("value.store AS store", "100 DIV value.amount AS amount")
     .group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount")], name=f"sales_{name[6:]}"))
    metrics = Metrics(CollectorRegistry())
    executor = (PlainFormExecutor if plain else SparkExecutor)(spark, t, metrics=metrics)
    coord = coordinator(t, executor, factory.txstate_store(name),
                        caps=Caps(per_partition=records // 2 if second else records, per_batch=records),
                        metrics=metrics)
    try:
        before = 0.0
        if second:
            assert coord.run_until_idle(max_batches=1) == 1
            before = bad_records(metrics)
        start = time.perf_counter()
        assert coord.run_until_idle(max_batches=1) == 1
        seconds = time.perf_counter() - start
    finally:
        coord.close()
    check_counts(name, stored_counts(factory, f"sales_{name[6:]}", "store", "total"), truth(cluster, topic))
    return seconds, bad_records(metrics) - before


#: the values each topic was filled with (the producer's truth)
PRODUCED: dict[str, list[tuple[int, bytes]]] = {}


def truth(cluster: KafkaPeer, topic: str) -> dict[str, int]:
    """Per store, the sum of ``100 DIV amount`` over the good records produced to ``topic`` (decode errors,
    null keys and zero amounts are skipped)."""
    totals: dict[str, int] = {}
    for _, value in PRODUCED[topic]:
        try:
            sale = json.loads(value)
        except ValueError:
            continue
        if sale.get("store") is not None and sale.get("amount"):
            totals[sale["store"]] = totals.get(sale["store"], 0) + 100 // sale["amount"]
    return totals


def bad_records(metrics: Metrics) -> float:
    return sum(s.value for m in metrics.registry.collect() if m.name == "trident_bad_records" for s in m.samples
               if s.name == "trident_bad_records_total")


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="rows to run (and clean)")
    parser.add_argument("--bootstrap", help="a real Kafka's bootstrap servers (default: librdkafka's mock cluster)")
    parser.add_argument("--state", choices=("sqlite", "cassandra"), default="sqlite")
    args = parser.parse_args(argv)
    rows = {row: ROWS[row] for row in ROWS if row == "clean" or row in args.rows}
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("app.spark.isolation_report").setLevel(logging.INFO)  # its rounds, with their times
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; one txid of {args.records} records, "
          f"2 partitions, local[2], errors: skip, {args.state}, "
          f"{'Kafka at ' + args.bootstrap if args.bootstrap else 'librdkafka mock cluster'}")
    spark = spark_session("local[2]", app_name="trident-bench-bad-records")
    ratios: dict[str, list[float]] = {}
    with ExitStack() as stack:
        cluster: KafkaPeer = stack.enter_context(closing(RealKafkaPeer(args.bootstrap) if args.bootstrap
                                                         else MockKafkaCluster(1)))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        cql = stack.enter_context(cassandra()) if args.state == "cassandra" else None
        topics = {}
        for i, (row, (share, bad)) in enumerate(rows.items()):
            topics[row] = f"bench-bad-{i}-{uuid.uuid4().hex[:6]}"
            cluster.create_topic(topics[row], 2, 1)
            n = args.records * (2 if row in SECOND_TXID else 1)
            PRODUCED[topics[row]] = values(n, share, bad, seed=i)
            produce(cluster.bootstrap_servers(), topics[row], PRODUCED[topics[row]])
        run(spark, cluster, topics["clean"], args.records, f"{tmp}/warm.db", cql=cql)  # a cold first txid: not measured
        rows_in_order = list(topics.items())
        for rep in range(1, args.repeat + 1):
            # each repetition starts one row later: the first txid after another row's runs slower, by no row's fault
            turn = rows_in_order[rep % len(rows_in_order):] + rows_in_order[:rep % len(rows_in_order)]
            timed = {row: run(spark, cluster, topic, args.records, f"{tmp}/{rep}-{row}.db", row in SECOND_TXID,
                              row in PLAIN_FORM, cql) for row, topic in turn}
            seconds = {row: timed[row] for row in topics}
            base = seconds["clean"][0]
            print(f"repetition {rep}: " + ", ".join(f"{row} {s:.2f} s ({s / base:.2f}x, {bad:.0f} bad)"
                                                   for row, (s, bad) in seconds.items()), flush=True)
            for row, (s, _) in seconds.items():
                ratios.setdefault(row, []).append(s / base)
    medians = {row: statistics.median(r) for row, r in ratios.items()}
    print("median time per txid as a ratio to clean: " + ", ".join(
        f"{row} {m:.2f}x" + (f" (goal <= {GOALS[row]}x)" if row in GOALS else "") for row, m in medians.items()))
    return medians
