"""``python -m tests.chaos``: run the scenarios side by side, compare with the truth, write the report.

Exit code 0 only when every scenario ends with 0 lost and 0 counted twice (and its own checks passed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from tests.chaos.catalog import SCENARIOS, error_policy_built, lane_class
from tests.chaos.lane import Lane
from tests.chaos.report import load, save, write_report
from tests.chaos.scenarios import Budget

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "0")) or int(time.time()))
    parser.add_argument("--kills", type=int, default=200, help="SIGKILLs to aim for (across every scenario) within --minutes")
    parser.add_argument("--minutes", type=float, default=25.0, help="how long the fault phases last")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--report", type=Path, help="write the markdown report here (plots beside it)")
    parser.add_argument("--workdir", type=Path, help="logs and configs (default: a fresh temporary directory)")
    parser.add_argument("--malformed", type=int, default=10_000, help="malformed records of the bad-records scenario")
    parser.add_argument("--report-from", type=Path, nargs="+", help="only write --report from the run.json of earlier runs")
    args = parser.parse_args(argv)
    if args.report_from is not None:
        write_report(args.report, [load(p) for p in args.report_from])
        return 0
    names = [n for n in args.scenarios.split(",") if n]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {args.seed}, scenarios {names}, {args.kills} kills or {args.minutes:g} min; logs in {workdir}",
          flush=True)
    started = time.time()
    load_before = os.getloadavg()
    lanes: list[Lane] = []
    try:
        return _run(args, names, workdir, lanes, started, load_before, argv)
    finally:
        for lane in lanes:
            lane.close()


def _run(args: argparse.Namespace, names: list[str], workdir: Path, lanes: list[Lane], started: float,
         load_before: tuple[float, float, float], argv: list[str] | None) -> int:
    if "bad-records" in names and not error_policy_built():
        print("chaos: bad-records NOT RUN: this build has no error policy (errors: dead_letter)", flush=True)
        names.remove("bad-records")
    for name in names:
        _, options, _ = SCENARIOS[name]
        seed = args.seed * 1000 + list(SCENARIOS).index(name)
        extra = {"malformed": args.malformed} if name in ("bad-records", "real") else {}
        lanes.append(lane_class(name)(name, seed, workdir, **options, **extra))  # type: ignore[arg-type]
    budget = Budget(time.monotonic(), time.monotonic() + args.minutes * 60, args.kills, lambda: sum(len(lane.kills) for lane in lanes))
    loads: list[tuple[float, float]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(15):
            loads.append((time.time() - started, os.getloadavg()[0]))

    threading.Thread(target=sample, daemon=True).start()

    def run(lane: Lane) -> None:
        try:
            lane.begin()
            SCENARIOS[lane.name][0](lane, budget)
        except Exception as e:  # noqa: BLE001 - reported as the scenario's failure
            lane.outcome.error = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        try:
            lane.drain_and_verify()
        except Exception as e:  # noqa: BLE001
            lane.outcome.error = (lane.outcome.error or "") + f" drain: {type(e).__name__}: {e}"
            traceback.print_exc()
        lane.recovery_times()
        o = lane.outcome
        print(f"chaos: {lane.name}: {'PASS' if o.passed else 'FAIL'} lost {o.lost} twice {o.twice} "
              f"({o.records} records, {o.keys} keys, {len(lane.kills)} kills, {len(lane.faults)} faults) "
              f"{o.notes[:3]} {o.error or ''}", flush=True)

    threads = [threading.Thread(target=run, args=(lane,), name=lane.name, daemon=True) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sampling.set()
    summary = {"seed": args.seed, "kills_asked": args.kills, "minutes": args.minutes, "started": started,
               "seconds": time.time() - started, "load_before": load_before, "loads": loads,
               "cpus": os.cpu_count(), "scenarios": names, "malformed": args.malformed, "harness": 4,
               "faults": {lane.name: SCENARIOS[lane.name][2] for lane in lanes}, "workdir": str(workdir)}
    record = workdir / "run.json"
    save(record, lanes, summary)
    if args.report is not None:
        write_report(args.report, [load(record)])
    passed = all(lane.outcome.passed for lane in lanes)
    total = sum(len(lane.kills) for lane in lanes)
    print(f"chaos: {'PASS' if passed else 'FAIL'}: {total} SIGKILLs, seed {args.seed}, "
          f"{time.time() - started:.0f} s", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
