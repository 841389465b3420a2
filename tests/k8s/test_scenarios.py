"""The chart on a real Kubernetes, each scenario ending in a key-by-key comparison of the stored state with
the producer's truth (tests/chaos/truth.py: built from delivery reports only)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.kit import Cluster
from tests.k8s.peers import PodPeers, sqlite_counts
from tests.k8s.release import Release, wait_for
from tests.k8s.report import Report
from tests.k8s.scenario import TABLE, assert_exact, chart_values, pipeline, producer, scenario, settle

START_S = 600  # a pod's start on a loaded two-core node: Spark, then the first txid


def _wait_committed(release: Release, pid: str, at_least: int, timeout: float = START_S) -> tuple[dict[str, Any], int]:
    def check() -> tuple[dict[str, Any], int] | None:
        found = release.active(pid)
        if found is None or int(found[1]["committed_txid"] or 0) < at_least:
            return None
        return found[0], int(found[1]["committed_txid"])
    try:
        found = wait_for(f"{pid} to commit txid {at_least}", check, timeout, every=1.0)
    except AssertionError:
        for pod in release.pods(running=False):
            print(release.logs(pod["metadata"]["name"]))
        print(release.events())
        raise
    assert found is not None  # wait_for returns a truthy result only
    return found


@pytest.mark.scenario("a")
def test_a_sqlite_on_the_volume_resumes_exactly_after_the_pod_is_deleted(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    with scenario(report, "a") as fig:
        topic, ns = f"k8s-a-{int(time.time())}", "trident-a"
        peers.create_topic(topic, 2)
        release = Release(cluster, "sqlite", ns, tmp_path)
        volume = cluster.volume("trident-a-data", "1Gi", f"{ns}/sqlite-trident-stream-data")
        values = chart_values(image, peers, [pipeline("words", topic, {
            "backend": "sqlite", "sqlite_path": "/var/lib/trident/data/trident.db", "table": TABLE})],
            persistence={"enabled": True, "storageClass": "-", "size": "1Gi"})
        words = producer(peers, topic)
        try:
            t0 = time.monotonic()
            release.install(values)
            pod, committed = _wait_committed(release, "words", 2)
            fig["install to txid 2"] = f"{time.monotonic() - t0:.0f} s"
            name = pod["metadata"]["name"]
            t1 = time.monotonic()
            cluster.kubectl("delete", "pod", "-n", ns, name, "--wait=false")
            gone = wait_for("the old pod to go", lambda: not any(p["metadata"]["name"] == name
                                                              for p in release.pods(running=False)), 120)
            assert gone
            stopped_s = time.monotonic() - t1
            new, resumed = _wait_committed(release, "words", committed + 1)
            assert new["metadata"]["name"] != name
            fig["pod deleted at"] = f"txid {committed} committed, the next in flight (producer at 40 records/s)"
            fig["old pod stopped after"] = f"{stopped_s:.1f} s (SIGTERM: the txid in flight finished first)"
            fig["recovery: delete to the new pod's first commit"] = (
                f"{time.monotonic() - t1:.0f} s (new pod, same volume, Spark start included), txid {resumed}")
            words.stop()
            truth = words.truth()
            fig["records produced (acknowledged)"] = words.acked
            stored = settle("the SQLite state to reach the truth", lambda: sqlite_counts(volume / "trident.db", TABLE),
                            truth)
            assert_exact(fig, truth, stored)
        finally:
            words.stop() if words.is_alive() else None
            release.uninstall()
            cluster.script("pv.sh", "--delete", "trident-a-data", timeout=60)


def _takeover(release: Release, pid: str, old: str, since: float, ttl: float) -> float:
    """Seconds from ``since`` until a pod other than ``old`` is active (holds the lease) for ``pid``."""
    def other_active() -> bool:
        found = release.active(pid)
        return found is not None and found[0]["metadata"]["name"] != old
    wait_for(f"a pod other than {old} to take {pid} over", other_active, ttl + 60, every=0.25)
    return time.monotonic() - since


def _roles(release: Release, pid: str) -> dict[str, str]:
    out = {}
    for pod in release.pods():
        try:
            out[pod["metadata"]["name"]] = str(release.pipeline(pod, pid)["state"])
        except (OSError, ValueError, KeyError):
            out[pod["metadata"]["name"]] = "no answer"
    return out


def _two_roles(release: Release, pid: str) -> dict[str, str] | None:
    roles = _roles(release, pid)
    return roles if sorted(roles.values()) == ["active", "standby"] else None


@pytest.mark.scenario("b")
def test_b_a_standby_takes_over_within_the_lease_ttl_exactly(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    with scenario(report, "b") as fig:
        topic, ns, keyspace = f"k8s-b-{int(time.time())}", "trident-b", f"k8s_b_{int(time.time())}"
        peers.create_topic(topic, 2)
        release = Release(cluster, "standby", ns, tmp_path)
        ttl = 10
        values = chart_values(image, peers, [pipeline("words", topic, {"backend": "cassandra", "table": TABLE})],
                              keyspace=keyspace, replicaCount=2, persistence={"enabled": False})
        words = producer(peers, topic)
        try:
            release.install(values)
            pod, committed = _wait_committed(release, "words", 2)
            roles = wait_for("one active and one standby pod", lambda: _two_roles(release, "words") or {}, START_S)
            fig["/readyz of each pod"] = ", ".join(f"{n}: {r}" for n, r in sorted(roles.items()))
            # 1. the active pod deleted: SIGTERM, it releases the lease, the standby takes it at once
            name = pod["metadata"]["name"]
            t0 = time.monotonic()
            cluster.kubectl("delete", "pod", "-n", ns, name, "--wait=false")
            took = _takeover(release, "words", name, t0, ttl)
            _wait_committed(release, "words", committed + 1, timeout=ttl + 120)
            fig["takeover after the active pod is deleted"] = (
                f"{took:.1f} s to the standby holding the lease, {time.monotonic() - t0:.1f} s to its first commit")
            assert took <= ttl + 5, f"takeover took {took:.1f} s, more than TTL {ttl} + 5 s"
            # 2. the active pod's process SIGKILLed: the lease expires, the standby takes it
            roles = wait_for("the replacement pod as standby", lambda: _two_roles(release, "words") or {}, START_S)
            pod, committed = _wait_committed(release, "words", 1)
            name = pod["metadata"]["name"]
            init = cluster.kubectl("exec", "-n", ns, name, "--", "kill", "-9", "1", check=False)
            time.sleep(2)
            still = release.active("words")
            fig["`kubectl exec ... kill -9 1`"] = (
                "no effect: the kernel does not deliver SIGKILL to a PID namespace's init (tini) from inside it; "
                "the service's own process was SIGKILLed instead"
                if still is not None and still[0]["metadata"]["name"] == name else f"exit {init.returncode}")
            t0 = time.monotonic()
            cluster.kubectl("exec", "-n", ns, name, "--", "sh", "-c", "kill -9 $(ps -o pid= --ppid 1)", check=False)
            took = _takeover(release, "words", name, t0, ttl)
            _wait_committed(release, "words", committed + 1, timeout=ttl + 120)
            fig["takeover after SIGKILL"] = (f"{took:.1f} s to the standby holding the lease (TTL {ttl} s), "
                                             f"{time.monotonic() - t0:.1f} s to its first commit")
            assert took <= ttl + 5, f"takeover took {took:.1f} s, more than TTL {ttl} + 5 s"
            words.stop()
            truth = words.truth()
            fig["records produced (acknowledged)"] = words.acked
            stored = settle("the Cassandra state to reach the truth", lambda: peers.cassandra_counts(keyspace, TABLE),
                            truth)
            assert_exact(fig, truth, stored)
        finally:
            words.stop() if words.is_alive() else None
            release.uninstall()


@pytest.mark.scenario("d")
def test_d_spark_executor_pods_one_deleted_mid_txid_exactly(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    with scenario(report, "d") as fig:
        topic, ns, keyspace = f"k8s-d-{int(time.time())}", "trident-d", f"k8s_d_{int(time.time())}"
        peers.create_topic(topic, 2)
        release = Release(cluster, "spark", ns, tmp_path)
        values = chart_values(image, peers, [pipeline("words", topic, {"backend": "cassandra", "table": TABLE})],
                              keyspace=keyspace, persistence={"enabled": False},
                              spark={"kubernetes": {"enabled": True, "executor": {
                                  "instances": 2, "cores": 1, "memory": "512m"}}})
        # executors request a tenth of a core each (the node has two, shared with the servers)
        values["config"]["spark"]["conf"]["spark.kubernetes.executor.request.cores"] = "100m"
        values["config"]["spark"]["conf"]["spark.executor.memoryOverhead"] = "384m"
        words = producer(peers, topic)
        try:
            t0 = time.monotonic()
            release.install(values)
            # what the chart renders for the driver: a headless Service and RBAC for executor pods
            svc = cluster.json("get", "service", "-n", ns, "spark-trident-stream-driver")
            assert svc["spec"]["clusterIP"] == "None"
            assert svc["spec"].get("publishNotReadyAddresses") is True
            role = cluster.json("get", "role", "-n", ns, "spark-trident-stream-spark")
            verbs = {v for r in role["rules"] if "pods" in r["resources"] for v in r["verbs"]}
            assert {"create", "delete", "watch", "list"} <= verbs
            can = cluster.kubectl("auth", "can-i", "create", "pods", "-n", ns,
                                  f"--as=system:serviceaccount:{ns}:spark-trident-stream", check=False)
            assert can.stdout.strip() == "yes", can.stdout + can.stderr
            executors = wait_for("two executor pods running", lambda: e if len(
                e := release.pods("spark-executor")) == 2 else [], START_S)
            _, committed = _wait_committed(release, "words", 2)
            fig["install to txid 2 (2 executor pods)"] = f"{time.monotonic() - t0:.0f} s"
            for e in executors:
                assert e["spec"]["containers"][0].get("workingDir") == "/tmp"
            victim = executors[0]["metadata"]["name"]
            t1 = time.monotonic()
            cluster.kubectl("delete", "pod", "-n", ns, victim, "--grace-period=0", "--force", "--wait=false")
            _, after = _wait_committed(release, "words", committed + 2, timeout=300)
            fig["executor pod deleted"] = f"at txid {committed} (force, grace 0: its tasks lost mid-txid)"
            fig["recovery: delete to 2 more commits"] = f"{time.monotonic() - t1:.0f} s (txid {after})"
            replaced = wait_for("Spark to replace the executor", lambda: len(
                [e for e in release.pods("spark-executor") if e["metadata"]["name"] != victim]) >= 2 or None, 300)
            assert replaced
            fig["executor pods replaced"] = f"{time.monotonic() - t1:.0f} s after the deletion"
            words.stop()
            truth = words.truth()
            fig["records produced (acknowledged)"] = words.acked
            stored = settle("the Cassandra state to reach the truth", lambda: peers.cassandra_counts(keyspace, TABLE),
                            truth)
            assert_exact(fig, truth, stored)
        finally:
            words.stop() if words.is_alive() else None
            release.uninstall()


@pytest.mark.scenario("e")
def test_e_the_topic_hook_job_creates_the_topic_before_the_pods_start(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    with scenario(report, "e") as fig:
        topic, ns = f"k8s-e-{int(time.time())}", "trident-e"
        assert topic not in peers.topics()
        release = Release(cluster, "topics", ns, tmp_path)
        values = chart_values(image, peers, [pipeline("words", topic, {
            "backend": "sqlite", "sqlite_path": "/var/lib/trident/data/trident.db", "table": TABLE})],
            persistence={"enabled": False}, topics={"job": {"enabled": True}})
        values["config"]["topics"] = {topic: {"partitions": 2}}
        t0 = time.monotonic()
        release.install(values)
        fig["helm install (the hook Job ran first)"] = f"{time.monotonic() - t0:.0f} s"
        assert topic in peers.topics()
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({"bootstrap.servers": peers.kafka}).list_topics(topic, timeout=30)
        assert len(meta.topics[topic].partitions) == 2
        events = cluster.json("get", "events", "-n", ns)["items"]
        job_done = [e for e in events if e["involvedObject"]["kind"] == "Job" and e["reason"] == "Completed"]
        assert job_done, [(e["involvedObject"]["kind"], e["reason"]) for e in events]
        deployment = cluster.json("get", "deployment", "-n", ns, "topics-trident-stream")
        done_at, created_at = job_done[0]["lastTimestamp"] or job_done[0]["eventTime"], \
            deployment["metadata"]["creationTimestamp"]
        assert done_at <= created_at, (done_at, created_at)
        fig["order"] = f"Job completed {done_at}, Deployment created {created_at}: topic {topic} with 2 partitions"
        words = producer(peers, topic)
        try:
            _wait_committed(release, "words", 2)
            words.stop()
            truth = words.truth()
            fig["records produced (acknowledged)"] = words.acked

            def stored() -> dict[str, int]:
                pod = release.pods()[0]
                out = cluster.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "python", "-c",
                                      "import json, sqlite3; print(json.dumps(dict(sqlite3.connect("
                                      "'file:/var/lib/trident/data/trident.db?mode=ro', uri=True).execute("
                                      f"'SELECT word, count FROM {TABLE}').fetchall())))")
                import json

                return {k: int(v) for k, v in json.loads(out.stdout).items()}
            assert_exact(fig, truth, settle("the state to reach the truth", stored, truth))
        finally:
            words.stop() if words.is_alive() else None
            release.uninstall()


def _is_ready(pod: dict[str, Any]) -> bool:
    """The pod's Ready condition is True (its readiness probe passed), as the Deployment and the PDB count it."""
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


class RolloutWatch:
    """Samples the release's coordinator pods during a rollout: how many existed and how many were Ready, and
    what the /readyz of each pod not Ready said (the last answer per pod)."""

    def __init__(self, release: Release) -> None:
        import threading

        self.release = release
        self.samples: list[tuple[int, int]] = []
        self.unready: dict[str, tuple[float, Any]] = {}  # pod -> (seconds into the watch, its /readyz or the error)
        self.none_ready_at: list[float] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                pods = self.release.pods(running=False)
            except RuntimeError:
                continue
            live = [p for p in pods if "deletionTimestamp" not in p["metadata"]]  # terminating ones finish their txid
            ready = [p for p in live if _is_ready(p)]
            at = time.monotonic() - self._t0
            self.samples.append((len(live), len(ready)))
            if live and not ready:
                self.none_ready_at.append(at)
            for p in live:
                if p not in ready and p["status"].get("podIP"):
                    try:
                        body: Any = self.release.readyz(p)
                    except (OSError, ValueError) as e:
                        body = f"no answer: {e}"
                    self.unready[p["metadata"]["name"]] = (at, body)

    def stop(self) -> tuple[int, int]:
        """(most pods at once, not counting terminating ones; fewest Ready at once)."""
        self._stop.set()
        self._thread.join(10)
        return max(n for n, _ in self.samples), min(r for _, r in self.samples)

    def explain(self) -> str:
        """When no pod was Ready, and what the pods not Ready last said."""
        spans = f"{self.none_ready_at[0]:.0f}-{self.none_ready_at[-1]:.0f} s" if self.none_ready_at else "never"
        said = "; ".join(f"{name} at {at:.0f} s: {body}" for name, (at, body) in sorted(self.unready.items()))
        return f"no pod Ready: {spans} into the rollout; not Ready: {said}"


@pytest.mark.scenario("c")
def test_c_helm_upgrade_and_drain_keep_one_pod_and_stay_exact(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    with scenario(report, "c") as fig:
        stamp = int(time.time())
        topic, topic2, ns, keyspace = f"k8s-c-{stamp}", f"k8s-c2-{stamp}", "trident-c", f"k8s_c_{stamp}"
        peers.create_topic(topic, 2)
        peers.create_topic(topic2, 2)
        release = Release(cluster, "upgrade", ns, tmp_path)
        first = pipeline("words", topic, {"backend": "cassandra", "table": TABLE})
        values = chart_values(image, peers, [first], keyspace=keyspace, replicaCount=2,
                              persistence={"enabled": False})
        words, words2 = producer(peers, topic), producer(peers, topic2, seed=7)
        try:
            release.install(values)
            _, committed = _wait_committed(release, "words", 2)
            wait_for("one active and one standby pod", lambda: _two_roles(release, "words"), START_S)
            # the watch counts Ready as Kubernetes does: the first readiness probe comes initialDelaySeconds after
            # the start, possibly after the pods answer /readyz and commit
            wait_for("both pods Ready", lambda: sum(map(_is_ready, release.pods())) == 2, START_S)
            # the upgrade: caps on the first pipeline and a second pipeline, while both topics receive records
            changed = {**first, "spout": {**first["spout"], "caps": {"per_partition": 300}}}
            upgraded = {**values, "config": {**values["config"], "pipelines": [
                changed, pipeline("letters", topic2, {"backend": "cassandra", "table": "word_counts_2"})]}}
            watch = RolloutWatch(release)
            t0 = time.monotonic()
            release.upgrade(upgraded)
            cluster.kubectl("rollout", "status", "-n", ns, "deployment/upgrade-trident-stream", "--timeout=900s",
                            timeout=960)
            most, fewest = watch.stop()
            fig["helm upgrade rolled out"] = (f"{time.monotonic() - t0:.0f} s; at most {most} pods at once, "
                                              f"never fewer than {fewest} Ready (maxSurge 1, maxUnavailable 0; terminating pods "
                                              "not counted)")
            assert fewest >= 1, watch.explain()
            assert most <= 3
            _wait_committed(release, "words", committed + 1)
            _wait_committed(release, "letters", 1)
            # the node drained: the PodDisruptionBudget (minAvailable 1) lets one pod go, never the last
            node = cluster.json("get", "nodes")["items"][0]["metadata"]["name"]
            t1 = time.monotonic()
            drain = cluster.kubectl("drain", node, "--pod-selector", "app.kubernetes.io/instance=upgrade",
                                    "--delete-emptydir-data", "--ignore-daemonsets", "--timeout=45s",
                                    check=False, timeout=120)
            cluster.kubectl("uncordon", node)
            left = release.pods()
            fig["kubectl drain (45 s timeout)"] = (
                f"exit {drain.returncode} after {time.monotonic() - t1:.0f} s, {len(left)} pod(s) left running: "
                + ("evictions refused by the PodDisruptionBudget" if "disruption budget" in drain.stderr
                   else drain.stderr.strip()[-200:]))
            assert drain.returncode != 0
            assert "disruption budget" in drain.stderr
            assert len(left) >= 1
            _, now = _wait_committed(release, "words", 1)
            _wait_committed(release, "words", now + 1)
            for p, table, key in ((words, TABLE, "words"), (words2, "word_counts_2", "letters")):
                p.stop()
                truth = p.truth()
                fig[f"{key}: records produced (acknowledged)"] = p.acked
                stored = settle(f"{key} to reach the truth", lambda t=table: peers.cassandra_counts(keyspace, t), truth)  # type: ignore[misc]  # defaults bind this call's values
                sub: dict[str, Any] = {}
                try:
                    assert_exact(sub, truth, stored)
                finally:
                    fig.update({f"{key}: {k}": v for k, v in sub.items()})
        finally:
            for p in (words, words2):
                p.stop() if p.is_alive() else None
            cluster.kubectl("uncordon", cluster.json("get", "nodes")["items"][0]["metadata"]["name"], check=False)
            release.uninstall()


#: Panels fed by the kubelet's cAdvisor and kube-state-metrics (not scraped here) and by a cluster master's
#: executors (a local master here): valid PromQL, no data expected.
NOT_HERE = {"Container memory (JVM included)", "Spark executors",
            "Largest partition (sharded tables)"}  # the state here is SQLite: no sharded table


@pytest.mark.scenario("f")
def test_f_prometheus_scrapes_the_pods_every_panel_has_data_and_pipeline_stopped_fires(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    import json
    import shutil
    import sqlite3

    from tests.deploy.prometheus import PrometheusServer, panel_queries

    chart = Path(__file__).resolve().parents[2] / "helm" / "trident-stream"
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus not found: run tests/deploy/install_tools.sh (Debian package prometheus)"
    with scenario(report, "f") as fig:
        topic, ns = f"k8s-f-{int(time.time())}", "trident-f"
        peers.create_topic(topic, 2)
        release = Release(cluster, "metrics", ns, tmp_path)
        volume = cluster.volume("trident-f-data", "1Gi", f"{ns}/metrics-trident-stream-data")
        # stopped on purpose: the second pipeline's table exists with other columns (a permanent failure)
        db = sqlite3.connect(volume / "trident.db")
        db.execute("CREATE TABLE broken (word TEXT PRIMARY KEY, something_else TEXT)")
        db.commit()
        db.close()
        shutil.chown(volume / "trident.db", 10001, 10001)
        state = {"backend": "sqlite", "sqlite_path": "/var/lib/trident/data/trident.db"}
        values = chart_values(image, peers, [pipeline("words", topic, {**state, "table": TABLE}),
                                             pipeline("stopped", topic, {**state, "table": "broken"})],
                              persistence={"enabled": True, "storageClass": "-", "size": "1Gi"})
        values["config"]["audit"] = {"every_s": 15}  # the Last audit panel: the service audits the pipelines it holds
        words = producer(peers, topic, rate=100)
        try:
            release.install(values)
            pod, _ = _wait_committed(release, "words", 2)
            target = f"{pod['status']['podIP']}:9400"
            queries = [(t, e) for t, e in panel_queries(json.loads((chart / "dashboards" / "trident-stream.json")
                                                                   .read_text())) if t not in NOT_HERE]
            with PrometheusServer(prometheus, [target], [chart / "rules" / "trident-stream.rules.yaml"],
                                  tmp_path) as prom:
                missing = dict(queries)
                stopped: list[dict[str, Any]] = []
                deadline = time.monotonic() + 180
                while (missing or not stopped) and time.monotonic() < deadline:
                    for title, expr in list(missing.items()):
                        try:
                            if prom.query(expr):
                                del missing[title]
                        except OSError:
                            pass
                    stopped = [a for a in prom.api("alerts")["alerts"]
                               if a["labels"]["alertname"] == "TridentPipelineStopped" and a["state"] == "firing"]
                    time.sleep(2)
                fig["scraped"] = f"the pod at {target} by Debian's prometheus on the host, every second"
                fig["dashboard queries with data"] = f"{len(queries) - len(missing)} of {len(queries)} " \
                    f"(not expected here: {', '.join(sorted(NOT_HERE))})"  # noqa: ISC002  a long message split for width
                assert not missing, f"panels without data: {sorted(missing)}"
                assert stopped, prom.api("alerts")
                assert stopped[0]["labels"]["pipeline"] == "stopped", prom.api("alerts")
                fig["TridentPipelineStopped"] = "firing for pipeline stopped (" + (
                    f"reason {stopped[0]['labels']['reason']}" if stopped[0]["labels"].get("reason")
                    else "from the failed-state gauge") + ")"
            readyz = release.readyz(pod)
            assert readyz["pipelines"]["stopped"]["state"] == "failed"
            assert readyz["pipelines"]["words"]["state"] == "active"
            words.stop()
            truth = words.truth()
            fig["records produced (acknowledged)"] = words.acked
            stored = settle("the SQLite state to reach the truth", lambda: sqlite_counts(volume / "trident.db", TABLE),
                            truth)
            assert_exact(fig, truth, stored)
        finally:
            words.stop() if words.is_alive() else None
            release.uninstall()
            cluster.script("pv.sh", "--delete", "trident-f-data", timeout=60)
