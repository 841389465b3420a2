"""docs/reliability.md from a real run: per scenario the faults, records and keys, lost and counted twice,
recovery from a kill to the next commit (p50/p99), a plot, the seed and the command that reproduces it."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.chaos.catalog import SCENARIOS
from tests.chaos.lane import FaultEvent, Kill, Lane, Outcome

KILL_FIELDS = {f.name for f in fields(Kill)}  # runs saved by older harnesses may carry more


METHOD = [
    "## How the faults are placed",
    "",
    ("- **SIGKILL** always goes to the whole process group: the service, Spark's JVM and its Python workers. "
    "Each kill records how far the process had got (from its log) and, read from the store once it settled, "
    "where it left the txid after the committed one: not frozen, frozen with no state written, or frozen "
    "with part of its state written (the window the freeze exists for)."),
    ("- **Random moments.** The random lane runs three instances (lease TTL 4 s). Two take turns: once the "
    "standby is up and waiting, the active one is killed 0-20 s after a commit of its own (the standby takes "
    "over), and now and then the standby is killed as it is. The third is started and killed 0.3-40 s "
    "(log-uniform) into its start-up, again and again while the run is behind its kill budget, which reaches "
    "every stage: Python, Spark, the store, the lease. (Runs before harness 4 killed the active instance 0-4 s "
    "after its first commit, so it rarely got further: those runs could not drain.)"),
    ("- **Pacing.** Every lane lets the service it just killed commit again before its next kill at it, "
    "and the drain at the end lasts as long as the stored counts keep moving (up to 5 minutes without a "
    "change, 30 in all): a shortfall while the backlog shrinks is not a loss."),
    ("- **Protocol points.** The CQL peer holds the next request that matches (a hold: the request waits "
    "in the server until released). Per txid the coordinator writes the freeze (`UPDATE trident_state SET "
    "value ... IF epoch` of `batches/<txid>`), then one LWT per key on the state table, then the mark "
    "(the same UPDATE of `coordinator`). The harness holds the freeze (checking the store that it is one), "
    "then either kills there, or arms a hold on the k-th state LWT and kills when it arrives, or holds "
    "the mark and kills there; the held request is then released, so it lands after its sender died, as "
    "a request in flight may on a real cluster. Plan and process send no request of their own: a kill "
    "right after a released mark lands in the next txid's plan, one 0.15-1.5 s later in its processing."),
    ("- **Standby and zombie.** The protocol lane runs three instances of one pipeline (lease TTL 4 s); "
    "each kill of the active one is followed by a takeover. A zombie is the active instance SIGSTOPped until "
    "a standby has taken the lease and committed, then SIGCONTed: it must stop without committing."),
    ("- **Retention.** The producer pauses, the service drains (every acknowledged record counted, no txid "
    "frozen), it is SIGKILLed, 50 records go to one partition and the first 30 of them are deleted "
    "(`rd_kafka_mock_partition_delete_records`): exactly those 30 leave the truth."),
    ("- **Recovery** is the time from a SIGKILL to the next commit of a txid beyond the one committed when "
    "the kill settled (the store polled every 0.2 s), over kills that stopped the working instance (not a "
    "standby's or a spare's while another instance worked) and whose restart was not itself killed first."),
    ("- **Aborted transactions** only in the real-server lane: librdkafka's mock serves aborted records to "
    "`read_committed` consumers (a known gap, checked by `tests/kafka/test_mock_cluster.py`), so the mock "
    "lanes' producers write committed transactions only."),
    ("- **Real servers** (the `real` lane, from run 6 on): the lane starts its own Apache Kafka 3.3 (KRaft, "
    "one node), Apache Cassandra 4.0 (one node) and Karapace (a Confluent-API Schema Registry) processes on "
    "loopback. The pipeline reads registry-framed JSON sales (`json_schema`), sums and counts them per user, "
    "and dead-letters malformed records. The producer writes in transactions and aborts one in ten on "
    "purpose (and any a broker kill makes abortable): aborted records are in the log and never in the "
    "truth. Two service instances take turns as active and standby (lease TTL 10 s): the active one is "
    "SIGKILLed 0-15 s after a commit of its own or as soon as the txid after the committed one is seen "
    "frozen in Cassandra (a commit in flight), the standby now and then in its start-up; a third instance "
    "is SIGKILLed in its start-up again and again while the run is behind its kill budget. Every 25-55 s, in "
    "turn, a server process is SIGKILLed and started again 0-8 s later: Cassandra while a txid is frozen "
    "and not yet marked (its commit log is replayed at the restart), the Kafka broker while the spout reads "
    "and the dead-letter producer writes, the registry. A Cassandra restart takes longer than the lease "
    "TTL, so the active instance stops itself (exit 1, 'lease lost') and is restarted, as an orchestrator "
    "would. No request can be held at a real node, so kills there are aimed by what the store shows, not "
    "by protocol point."),
]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def drained(o: Outcome) -> bool:
    """Whether the counts reached the truth in the drain window (the drain waits for equality or its deadline)."""
    return o.drained if o.drained is not None else (o.lost == 0 and o.twice == 0)


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} s"


def recoveries(lane: Any) -> list[float]:
    """Seconds from a kill to the next commit, for kills that stopped the working instance and whose restart
    was not itself killed first."""
    stops = [k for k in lane.kills if k.interrupts]
    return [k.recovered_s for k in stops if k.recovered_s is not None
            and not any(k.t < o.t < k.t + k.recovered_s for o in stops)]


def plot(lane: Any, path: Path) -> None:
    import matplotlib  # noqa: ICN001  the module's own name

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), gridspec_kw={"height_ratios": [3, 2]})
    t0 = lane.started
    if lane.commits:
        top.step([t - t0 for t, _ in lane.commits], [x for _, x in lane.commits], where="post", label="committed txid")
    for i, k in enumerate(lane.kills):
        top.axvline(k.t - t0, color="red", alpha=0.35, lw=0.8, label="SIGKILL" if i == 0 else None)
    colors: dict[str, Any] = {}
    palette = plt.get_cmap("tab10")
    for f in lane.faults:
        new = f.kind not in colors
        c = colors.setdefault(f.kind, palette(len(colors) % 10))
        top.axvspan(f.t0 - t0, max(f.t1, f.t0 + 0.5) - t0, color=c, alpha=0.25, label=f.kind if new else None)
    top.set_xlabel("seconds since the scenario started")
    top.set_ylabel("committed txid")
    top.set_title(f"{path.stem}: {len(lane.kills)} SIGKILLs, {len(lane.faults)} other faults")
    top.legend(loc="upper left", fontsize=7)
    rec = recoveries(lane)
    if rec:
        bottom.hist(rec, bins=min(30, max(5, len(rec) // 2)), color="tab:blue")
    bottom.set_xlabel("seconds from a SIGKILL to the next commit")
    bottom.set_ylabel("kills")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def save(path: Path, lanes: list[Lane], summary: dict[str, Any]) -> None:
    """Everything the report needs, as JSON (a report can be written again from it)."""
    doc = {"summary": summary, "lanes": [
        {"name": lane.name, "started": lane.started, "commits": lane.commits, "kills": [asdict(k) for k in lane.kills],
         "faults": [asdict(f) for f in lane.faults], "outcome": asdict(lane.outcome)} for lane in lanes]}
    path.write_text(json.dumps(doc, indent=1))


def load(path: Path) -> tuple[list[Any], dict[str, Any]]:
    """A saved run: its lanes (as plain records) and its summary."""
    doc = json.loads(path.read_text())
    lanes = [SimpleNamespace(name=d["name"], started=d["started"], commits=[tuple(c) for c in d["commits"]],
                             kills=[Kill(**{f: v for f, v in k.items() if f in KILL_FIELDS}) for k in d["kills"]], faults=[FaultEvent(**f) for f in d["faults"]],
                             outcome=Outcome(**d["outcome"])) for d in doc["lanes"]]
    return lanes, doc["summary"]


def run_paragraph(lanes: list[Any], summary: dict[str, Any], number: int | None) -> list[str]:
    """When, with which seed, how many kills, how loaded the machine was, and the command to run it again."""
    seed = summary["seed"]
    total = sum(len(lane.kills) for lane in lanes)
    passed = all(lane.outcome.passed for lane in lanes)
    loads = [load for _, load in summary["loads"]]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(summary["started"]))
    return [
        (f"**Run {'' if number is None else f'{number} '}({', '.join(lane.name for lane in lanes)}):** {started}, "
        f"seed {seed}, {total} SIGKILLs, "
        f"{summary['seconds'] / 60:.0f} minutes, "
        f"{'every scenario passed' if passed else 'AT LEAST ONE SCENARIO FAILED'}. "
        f"Machine: {summary['cpus']} cores shared with other work; load average before the run "
        f"{summary['load_before'][0]:.1f}, during it {min(loads, default=0):.1f}-{max(loads, default=0):.1f} "
        f"(mean {statistics.fmean(loads) if loads else 0:.1f}). Reproduce: `{command(summary)}`."),
        "",
    ]


def headline(runs: list[tuple[list[Any], dict[str, Any]]]) -> str:
    """The latest run's result first; with earlier runs, how many of them had a failing scenario."""
    def verdict(lanes: list[Any]) -> str:
        return "every scenario passed" if all(lane.outcome.passed for lane in lanes) else "AT LEAST ONE SCENARIO FAILED"

    latest = runs[-1][0]
    text = (f"**{'Latest run (run ' + str(len(runs)) + ')' if len(runs) > 1 else 'The run'}: "
            f"{sum(len(lane.kills) for lane in latest)} SIGKILLs, {verdict(latest)}.**")
    if len(runs) > 1:
        failing = sum(not all(lane.outcome.passed for lane in lanes) for lanes, _ in runs[:-1])
        kills = sum(len(lane.kills) for lanes, _ in runs for lane in lanes)
        text += (f" The report keeps every run: {kills} SIGKILLs in all; {failing} of the {len(runs) - 1} earlier "
                 "runs had a failing scenario, each described below with its seed and cause.")
    return text


def command(summary: dict[str, Any], scenario: str | None = None) -> str:
    names = scenario or ",".join(summary["scenarios"])
    with_bad = "bad-records" in names or "real" in names.split(",")
    extra = f" CHAOS_MALFORMED={summary['malformed']}" if with_bad and "malformed" in summary else ""
    return (f"make chaos CHAOS_SEED={summary['seed']} CHAOS_SCENARIOS={names} CHAOS_KILLS={summary['kills_asked']} "
            f"CHAOS_MINUTES={summary['minutes']:g}{extra}")


def write_report(path: Path, runs: list[tuple[list[Any], dict[str, Any]]]) -> None:
    """The report of one or more runs (each scenario appears in one of them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    images = path.parent / "reliability"
    images.mkdir(exist_ok=True)
    lanes = [lane for run_lanes, _ in runs for lane in run_lanes]
    summaries = {id(lane): summary for run_lanes, summary in runs for lane in run_lanes}
    titles: dict[int, str] = {}
    for i, (run_lanes, _) in enumerate(runs, 1):
        for lane in run_lanes:
            repeated = sum(other.name == lane.name for other in lanes) > 1
            titles[id(lane)] = f"{lane.name}-run-{i}" if repeated else lane.name
    lines = [
        "# Reliability: the chaos suite's figures",
        "",
        "Generated by `python -m tests.chaos` (`make chaos`) from the runs below; nothing here is typed by hand.",
        ("Every scenario runs real `python -m app run` processes (each with its Spark JVM and Python workers) "
        "against its own librdkafka mock Kafka cluster (3 brokers) and its own CQL test server process (the "
        "`real` scenario: against real Kafka, Cassandra and Schema Registry processes of its own), while a "
        "producer writes at a steady rate. The truth is the set of records the producer's delivery reports "
        "acknowledged (for transactional producing: whose transaction committed), minus exactly the records "
        "retention removed before the service read them; it is compared with the stored counts key by key. "
        "*Lost* sums, over keys, how much a stored count falls short of the truth; *counted twice* how much it "
        "exceeds it."),
        "",
        headline(runs) + " A seed fixes every choice of moment, point, fault and duration; the machine's timing "
        "decides the interleaving.",
        "",
        *[line for i, (run_lanes, summary) in enumerate(runs, 1)
          for line in run_paragraph(run_lanes, summary, i if len(runs) > 1 else None)],
        *METHOD,
        "",
        ("| scenario | result | SIGKILLs | other faults | records | keys | lost | counted twice | recovery p50 | "
        "recovery p99 |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lane in lanes:
        o, rec = lane.outcome, recoveries(lane)
        result = "pass" if o.passed else "**FAIL** (not drained)" if not drained(o) else "**FAIL**"
        lines.append(f"| [{titles[id(lane)]}](#{titles[id(lane)]}) | {result} | {len(lane.kills)} | "
                     f"{len(lane.faults)} | {o.records} | {o.keys} | {o.lost} | {o.twice} | "
                     f"{fmt(percentile(rec, 50))} | {fmt(percentile(rec, 99))} |")
    lines.append("")
    for lane in lanes:
        o, rec = lane.outcome, recoveries(lane)
        title, summary = titles[id(lane)], summaries[id(lane)]
        image = images / f"{title}.png"
        plot(lane, image)
        aimed = Counter(k.aimed if not k.aimed.startswith("commit write") else "commit write" for k in lane.kills)
        writes = sorted({int(k.aimed.split()[-1]) for k in lane.kills if k.aimed.startswith("commit write")})
        landed = Counter(k.landed for k in lane.kills)
        stages = Counter(k.stage for k in lane.kills)
        kinds = Counter(f.kind for f in lane.faults)
        lines += [
            f"## {title}",
            "",
            (f"**Did not drain** (seed {summary['seed']}): when its drain window closed the stored counts were "
             f"{o.lost} words short of the truth and {o.twice} over; a shortfall while a backlog remains is not a "
             "loss, but this run cannot show there was none. " if not drained(o) else "") +
            f"**{'Passed' if o.passed else 'FAILED'}** with seed {summary['seed']}: lost {o.lost}, counted twice {o.twice} "
            f"({o.differing} keys differ) over {o.keys} keys, {o.words} words in {o.records} acknowledged records"
            + (f" ({o.excluded} of them removed by retention before they were read, so not in the truth)"
               if o.excluded else "") + ".",
            "",
            f"*Faults:* {summary.get('faults', {}).get(lane.name) or SCENARIOS[lane.name][2]}.",
            "",
            f"- SIGKILLs: {len(lane.kills)}; aimed at: " + ", ".join(f"{k} {n}" for k, n in aimed.most_common())
            + (f" (commit writes number {', '.join(map(str, writes))})" if writes else ""),
            "- how far the killed process had got (from its log): "
            + ", ".join(f"{k} {n}" for k, n in stages.most_common()),
            "- where they left the txid after the committed one (read from the store after each kill): "
            + (", ".join(f"{k} {n}" for k, n in landed.most_common()) if summary.get("harness", 1) >= 2 else
               "not known for this run (the harness then looked for plans under unpadded keys and read every kill "
               "as 'not frozen'; its protocol-point steering took the next coordinator write, freeze or mark, as "
               "the freeze)"),
            "- other faults: " + (", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "none"),
            (f"- recovery, SIGKILL to the next commit (over {len(rec)} kills that stopped the working instance and "
            f"whose restart was not killed first): p50 {fmt(percentile(rec, 50))}, p99 {fmt(percentile(rec, 99))}, max "
            f"{fmt(max(rec) if rec else None)}"),
            *([f"- final drain (faults and producer stopped, one instance catching up): {o.drain_s:.0f} s"]
              if o.drain_s is not None else []),
        ]
        details = [f for f in lane.faults if f.kind == "zombie" or f.kind.startswith("truncation")]
        server_kills = [f for f in lane.faults if f.kind.endswith(" SIGKILL")]
        for server in sorted({f.kind for f in server_kills}):
            mine = [f for f in server_kills if f.kind == server]
            where = Counter(f.detail.split(";")[0] for f in mine)
            lines.append(f"- {server}: {len(mine)}, " + ", ".join(f"{k} {n}" for k, n in where.most_common()))
        lines += [f"- {f.kind}: {f.detail}" for f in details]
        if o.error:
            lines.append(f"- **error:** {o.error}")
        lines += [f"- note: {n}" for n in o.notes]
        lines += ["", f"![{title}](reliability/{image.name})", "",
                  f"Reproduce: `{command(summary, lane.name)}`", ""]
    lines += cluster_section(images / CLUSTER_RECORD)
    for name in KEPT_BY_HAND:
        kept = images / name
        lines += ["", *kept.read_text().splitlines()] if kept.exists() else []
    path.write_text("\n".join(lines))


# Behaviour tests, not chaos runs: sections beside the plots, appended as they are (written by hand, or by their
# lane: replicas.md by tests/replicas/record.py).
KEPT_BY_HAND = ("positions.md", "odd-records.md", "state-and-keys.md", "replicas.md")


CLUSTER_RECORD = "spark-cluster.json"  # beside the plots: the last recorded run of the cluster kill test


def cluster_section(record: Path) -> list[str]:
    """The Spark cluster kill test (tests/service/test_spark_cluster.py) from the run it recorded, if any."""
    if not record.exists():
        return []
    r = json.loads(record.read_text())
    return [
        "## Spark standalone cluster",
        "",
        ("`tests/service/test_spark_cluster.py` (CI runs it with the real servers; not part of the chaos runs "
        "above). One service instance runs the word count with `spark.master` a standalone master on loopback "
        "and two workers of 1 core each (`tests/sparkcluster.py`): its executors are JVMs of their own, with "
        "their own Python workers. A producer writes sentences (300 a second asked) to real Apache Kafka 3.3 "
        "(4 partitions) throughout; the counts go to real Apache Cassandra 4.0 (`cache_size: 100`). In order: "
        "one executor JVM is SIGKILLed after the first commit; worker 0 is SIGKILLed with its executor and "
        "started again after two more commits; the service's process group is SIGKILLed while a txid is "
        "frozen and not yet committed, and started again; once both executors run again one more executor is "
        "SIGKILLed. Then the producer stops, the service drains and stops, and every stored count is compared "
        "with the words of the sentences the producer's delivery reports acknowledged; the test also checks "
        "that the service sized its tasks from the executors' cores."),
        "",
        (f"**{'Passed' if r['lost'] == 0 and r['twice'] == 0 else 'FAILED'}** on {r['started']}: lost "
        f"{r['lost']}, counted twice {r['twice']} ({r['differing']} keys differ) over {r['keys']} keys, "
        f"{r['words']} words in {r['sentences']} acknowledged sentences; {r['commits']} txid commits logged, "
        f"{r['seconds']:.0f} s in all. Machine: {r['cpus']} cores shared with other work; load average "
        f"{r['load_before']:.1f} before, {r['load_after']:.1f} after."),
        "",
        "- SIGKILLs: " + "; ".join(r["kills"]),
        "",
        f"Recorded by `{r['command']}`.",
        "",
    ]
