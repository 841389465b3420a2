"""Exactly once on a replicated cluster: 3 Cassandra nodes (keyspace RF 3, the service's default LOCAL_QUORUM /
LOCAL_SERIAL) and 3 Kafka brokers (topics RF 3, ``min.insync.replicas=2``), with one node or two lost under a running
pipeline. Each scenario ends in a key-by-key comparison of the stored counts with the producer's truth (its delivery
reports and committed transactions only). The letters are the lane's scenarios (REPLICA_SCENARIOS selects)."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replicas.cluster import Cluster
from tests.replicas.conftest import rounds
from tests.replicas.lane import REQUEST_TIMEOUT_S, Outcome, ReplicaRun

pytestmark = pytest.mark.slow

#: The two table layouts of scenario (g): a partition per key (one LWT per key), and keys in 4 shards (one
#: conditional batch per shard).
LAYOUTS = {"partition-per-key": 0, "sharded": 4}

#: What a Cassandra kill is aimed at, in turn, by the kind of state request seen in flight: ``cas``, the commit's
#: LWTs (or conditional batches) and the txid store's conditional writes (a plan frozen, a txid marked); ``read``,
#: the reads of stored values and plans; ``lease``, the lease's renewal; ``write``, plain writes.
AIMS = ("cas", "read", "lease", "write")

SHORT_HANGS = 4  # short hangs of two replicas at most, until one meets an LWT in flight
SHORT_HANG_S = 8.0  # two replicas hung past the server's write timeout (5 s at most in the lane's cluster), then back


@pytest.fixture
def runs(cluster: Cluster, workdir: Path) -> Iterator[list[ReplicaRun]]:
    made: list[ReplicaRun] = []
    yield made
    for r in made:
        r.close()
    cluster.heal()


def new_run(runs: list[ReplicaRun], cluster: Cluster, workdir: Path, name: str, **options: object) -> ReplicaRun:
    run = ReplicaRun(cluster, f"{name}-{int(time.time()) % 100000}", workdir, **options)  # type: ignore[arg-type]
    runs.append(run)
    return run


def resolved(run: ReplicaRun) -> int:
    """Unknown LWT outcomes the service resolved by a serial read so far."""
    unknown = run.unknown_outcomes()
    return unknown["applied"] + unknown["not_applied"]


def assert_exact(o: Outcome) -> None:
    assert o.exact(), o.line()
    assert o.exit_code == 0, o.line()
    assert o.records > 0, o.line()


@pytest.mark.scenario("a")
@pytest.mark.scenario("g")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_cassandra_node_killed_again_and_again(cluster: Cluster, workdir: Path, runs: list[ReplicaRun],
                                                 layout: str) -> None:
    """One Cassandra node of three SIGKILLed at the commit's LWTs, the reads, the lease and the txid-store writes,
    in turn and on each node, restarted each time: the pipeline commits on without a process restart, each stall at
    most twice the request timeout, and every record counts once."""
    run = new_run(runs, cluster, workdir, f"a-{layout}", shards=LAYOUTS[layout])
    rng = random.Random(1)
    service = run.begin()
    outcome = Outcome()
    for i, aim, node in zip(range(rounds()), itertools.cycle(AIMS), itertools.cycle((3, 2, 1)), strict=False):
        run.wait_commits(1, 120)
        aimed = run.in_flight(service, aim)
        t0 = time.monotonic()
        cluster.node("kill", "cassandra", node)
        run.say(f"kill {i + 1}: Cassandra node {node} SIGKILLed "
                + (f"with {aim} requests in flight" if aimed else f"({aim} requests never seen in flight)"))
        time.sleep(rng.uniform(0.0, 5.0))
        run.wait_commits(2, 3 * REQUEST_TIMEOUT_S + 60, since=t0)  # on two replicas, before the node is back
        took = cluster.node("start", "cassandra", node)
        run.wait_commits(2, 120)
        stall = run.longest_gap(t0, time.monotonic())
        outcome.stalls.append((f"node {node} at {aim}", stall))
        run.say(f"kill {i + 1}: node {node} back in {took:.0f} s; longest commit stall {stall:.1f} s")
        service.check_alive()
    assert_exact(run.finish(outcome))
    worst = max(s for _, s in outcome.stalls)
    assert worst <= 2 * REQUEST_TIMEOUT_S, f"a commit stall of {worst:.1f} s with one node of three down: {outcome.line()}"


@pytest.mark.scenario("b")
@pytest.mark.scenario("g")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_b_two_cassandra_nodes_down_stop_cleanly_and_resume(cluster: Cluster, workdir: Path, runs: list[ReplicaRun],
                                                            layout: str) -> None:
    """Two Cassandra nodes of three hung for a few seconds with the commit's LWTs in flight (their outcome unknown,
    then resolved by serial reads), then hung and SIGKILLed: commits stop, ``/readyz`` says why; once one node is
    back, commits resume by themselves, and every record counts once."""
    run = new_run(runs, cluster, workdir, f"b-{layout}", shards=LAYOUTS[layout])
    service = run.begin()
    outcome = Outcome()
    for i in range(rounds()):
        for _ in range(SHORT_HANGS):  # until an LWT in flight met the hang (the moment is the machine's to choose)
            run.wait_commits(1, 120)
            before = resolved(run)
            aimed = run.in_flight(service, "cas")
            t0 = time.monotonic()
            for node in (2, 3):
                cluster.node("pause", "cassandra", node)
            time.sleep(SHORT_HANG_S)  # past the server's write timeout: the coordinator answers "outcome unknown"
            for node in (2, 3):
                cluster.node("resume", "cassandra", node)
            run.wait_commits(2, 180)
            run.say(f"round {i + 1}: nodes 2 and 3 hung {SHORT_HANG_S:.0f} s "
                    + ("with LWTs in flight" if aimed else "(no LWT seen in flight)")
                    + f"; unknown outcomes so far {dict(run.unknown_outcomes())}")
            outcome.stalls.append(("nodes 2 and 3 hung", run.longest_gap(t0, time.monotonic())))
            if resolved(run) > before:
                break

        run.wait_commits(1, 120)
        aimed = run.in_flight(service, "cas")
        t0 = time.monotonic()
        for node in (2, 3):
            cluster.node("pause", "cassandra", node)
        time.sleep(2 * REQUEST_TIMEOUT_S)
        for node in (2, 3):
            cluster.node("kill", "cassandra", node)
        run.say(f"round {i + 1}: nodes 2 and 3 hung " + ("with LWTs in flight" if aimed else "(no LWT seen in flight)")
                + ", then SIGKILLed")
        stopped_at = run.committed()
        time.sleep(REQUEST_TIMEOUT_S)
        status, body = service.readyz()
        run.say(f"round {i + 1}: /readyz {status}: {body}")
        assert status != 200, f"/readyz answered 200 with two of three replicas down: {body}"
        reason = str(body["pipelines"][run.name].get("reason"))
        assert reason in service.run_log(), f"the log does not say what /readyz says ({reason})"
        assert run.committed() <= stopped_at + 1, "commits went on with two of three replicas down"
        took = cluster.node("start", "cassandra", 2)
        resumed = run.wait_commits(2, 240)
        run.say(f"round {i + 1}: node 2 back in {took:.0f} s; commits resumed {resumed:.0f} s after")
        cluster.node("start", "cassandra", 3)
        outcome.stalls.append(("nodes 2 and 3 down", run.longest_gap(t0, time.monotonic())))
        service.check_alive()
    assert_exact(run.finish(outcome))
    assert outcome.unknown["applied"] + outcome.unknown["not_applied"] > 0, (
        f"no unknown LWT outcome was met and resolved in {SHORT_HANGS} short hangs: {outcome.line()}")


@pytest.mark.scenario("c")
def test_c_a_cassandra_node_hung_for_30_s(cluster: Cluster, workdir: Path, runs: list[ReplicaRun]) -> None:
    """A gray failure: one Cassandra node SIGSTOPped for 30 s (its sockets open, nothing answering), then resumed:
    commits go on, each stall about two request timeouts at most (not the whole hang), and every record counts
    once."""
    run = new_run(runs, cluster, workdir, "c")
    service = run.begin()
    outcome = Outcome()
    for i, node in zip(range(rounds()), itertools.cycle((2, 1, 3)), strict=False):
        run.wait_commits(1, 120)
        aimed = run.in_flight(service, "cas")
        t0 = time.monotonic()
        cluster.node("pause", "cassandra", node)
        time.sleep(30.0)
        cluster.node("resume", "cassandra", node)
        run.wait_commits(2, 120)
        stall = run.longest_gap(t0, time.monotonic())
        outcome.stalls.append((f"node {node} hung", stall))
        run.say(f"round {i + 1}: node {node} hung 30 s " + ("with LWTs in flight" if aimed else "")
                + f"; longest commit stall {stall:.1f} s")
        service.check_alive()
    assert_exact(run.finish(outcome))
    worst = max(s for _, s in outcome.stalls)
    # The requests a hung node coordinates wait out the request timeout; those sent to it before the first of them
    # timed out (and put it last in the query plans) wait one more: about two timeouts at most, not the whole hang.
    limit = 2 * REQUEST_TIMEOUT_S + 5.0
    assert worst <= limit, f"a commit stall of {worst:.1f} s with one node hung: {outcome.line()}"


@pytest.mark.scenario("d")
def test_d_brokers_lost_under_a_transactional_source(cluster: Cluster, workdir: Path, runs: list[ReplicaRun]) -> None:
    """The source written in transactions (a fifth aborted on purpose) under ``read_committed``: the leader broker of
    the source's partition 0 SIGKILLed mid-read and restarted, then a broker paused for 20 s, then a broker restarted
    while transactions are open: nothing read twice, no aborted record counted."""
    run = new_run(runs, cluster, workdir, "d", transactional=True, abort_ratio=0.2)
    service = run.begin()
    outcome = Outcome()
    for i in range(rounds()):
        run.wait_commits(1, 120)
        leader = cluster.leader(run.topic, 0)
        run.in_flight(service, "read")
        t0 = time.monotonic()
        cluster.node("kill", "kafka", leader)
        run.say(f"round {i + 1}: broker {leader} (leader of partition 0) SIGKILLed mid-read")
        run.wait_commits(2, 180, since=t0)  # on the two brokers left
        cluster.node("start", "kafka", leader)
        outcome.stalls.append((f"leader broker {leader} killed", run.longest_gap(t0, time.monotonic())))

        paused = leader % 3 + 1
        t0 = time.monotonic()
        cluster.node("pause", "kafka", paused)
        time.sleep(20.0)
        cluster.node("resume", "kafka", paused)
        run.wait_commits(2, 180)
        outcome.stalls.append((f"broker {paused} hung 20 s", run.longest_gap(t0, time.monotonic())))

        restarted = paused % 3 + 1
        t0 = time.monotonic()
        cluster.node("stop", "kafka", restarted)  # the producer's transactions stay open across it
        cluster.node("start", "kafka", restarted)
        run.wait_commits(2, 180)
        outcome.stalls.append((f"broker {restarted} restarted", run.longest_gap(t0, time.monotonic())))
        run.say(f"round {i + 1}: broker {paused} hung 20 s, broker {restarted} restarted; "
                f"{run.producer.transactions} transactions committed, {run.producer.aborted} aborted so far")
        service.check_alive()
    assert_exact(run.finish(outcome))
    assert outcome.aborted_transactions > 0, f"no transaction was aborted: {outcome.line()}"


@pytest.mark.scenario("e")
def test_e_rolling_restarts_of_every_node(cluster: Cluster, workdir: Path, runs: list[ReplicaRun]) -> None:
    """An operator's upgrade: the three Cassandra nodes stopped and started one after another, then the three
    brokers, while the pipeline runs: no commit gap over 30 s, and every record counts once."""
    run = new_run(runs, cluster, workdir, "e")
    service = run.begin()
    outcome = Outcome()
    for server in ("cassandra", "kafka"):
        for node in (1, 2, 3):
            run.wait_commits(1, 120)
            t0 = time.monotonic()
            cluster.node("stop", server, node)
            took = cluster.node("start", server, node)
            run.wait_commits(2, 120)
            gap = run.longest_gap(t0, time.monotonic())
            outcome.stalls.append((f"{server} {node} restarted", gap))
            run.say(f"{server} node {node} restarted ({took:.0f} s to start); longest commit gap {gap:.1f} s")
        service.check_alive()
    assert_exact(run.finish(outcome))
    worst = max(s for _, s in outcome.stalls)
    assert worst <= 30.0, f"a commit gap of {worst:.1f} s in a rolling restart: {outcome.line()}"


@pytest.mark.scenario("f")
def test_f_standby_takes_over_when_the_active_contact_node_died(cluster: Cluster, workdir: Path,
                                                                runs: list[ReplicaRun]) -> None:
    """The active instance knows Cassandra by node 2 alone, its standby by nodes 1 and 3: node 2 SIGKILLed, then the
    active instance SIGKILLed; the standby takes over within the lease's TTL and every record counts once."""
    points = cluster.contact_points
    run = new_run(runs, cluster, workdir, "f", lease_ttl_s=15.0, contact_points=[[points[1]], [points[0], points[2]]])
    active = run.begin()
    standby = run.services[1].start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and "standby; " not in standby.run_log():
        time.sleep(0.5)
    assert "standby; " in standby.run_log(), f"the second instance never waited as a standby:\n{standby.tail(30)}"
    run.wait_commits(1, 120)
    t0 = time.monotonic()
    cluster.node("kill", "cassandra", 2)
    active.kill()
    run.say("Cassandra node 2 (the active's only contact point) and the active instance SIGKILLed")
    took = run.wait_commits(2, 240, since=t0)
    run.say(f"the standby committed {took:.0f} s after the kill")
    assert "lease epoch 2" in standby.run_log(), f"the standby did not take the lease:\n{standby.tail(30)}"
    cluster.node("start", "cassandra", 2)
    outcome = Outcome(stalls=[("takeover", run.longest_gap(t0, time.monotonic()))])
    assert_exact(run.finish(outcome))
