"""docs/deploy-report.md: what ``make test-k8s`` ran, on which commit and Kubernetes, with its figures."""

from __future__ import annotations

import datetime  # noqa: ICN001  the module's own name
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.k8s.kit import ROOT

REPORT = ROOT / "docs" / "deploy-report.md"

TITLES = {
    "image": "The image: entrypoint, non-root user, read-only root, SIGTERM through tini",
    "a": "a. SQLite state on the PersistentVolumeClaim: the pod deleted mid-txid",
    "b": "b. Cassandra state, two replicas: the active pod deleted, then its process SIGKILLed",
    "c": "c. `helm upgrade` with a config change while records flow; `kubectl drain` and the PodDisruptionBudget",
    "d": "d. Spark executors as pods: one deleted mid-txid",
    "e": "e. The topic hook Job before the pods",
    "f": "f. Metrics: Prometheus scrapes the pods, the dashboard's queries, PipelineStopped",
}


@dataclass
class Report:
    general: dict[str, Any] = field(default_factory=dict)
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)

    def scenario(self, key: str) -> dict[str, Any]:
        return self.scenarios.setdefault(key, {"outcome": "not finished"})

    def write(self, path: Path = REPORT) -> None:
        """Write the report; a scenario not run this time keeps its section from the previous report (each
        section names the run it comes from), so ``K8S_SCENARIOS`` runs add up."""
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        now = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}"
        run = f"{now}, commit `{commit[:12]}`{' (with uncommitted changes)' if dirty else ''}"
        previous = _sections(path.read_text()) if path.exists() else {}
        lines = ["# Deployment report: `helm install` on a real Kubernetes", "",
                 "Written by `make test-k8s` (tests/k8s). Each scenario installs the chart with the image built from",
                 "this commit's Dockerfile, produces records while it disturbs the pods, then compares the stored",
                 "state with the producer's truth key by key (`lost`, `twice`: records counted too few or too many",
                 "times; both 0 means exact). A scenario not selected in the last run keeps its section from the",
                 "run named in it.", "",
                 f"## The last run: {run}", ""]
        lines += [f"- {k}: {v}" for k, v in self.general.items()]
        not_run = []
        for key in ("image", "a", "b", "d", "e", "c", "f"):
            title = f"## {TITLES[key]}"
            if key in self.scenarios:
                s = self.scenarios[key]
                lines += ["", title, "", f"- run: {run}", f"- outcome: **{s['outcome']}**"]
                lines += [f"- {k}: {v}" for k, v in s.items() if k != "outcome"]
            elif title in previous:
                lines += ["", title, "", *previous[title]]
            else:
                not_run.append(TITLES[key])
        if not_run:
            lines += ["", "## Not run yet", ""] + [f"- {t}" for t in not_run]
        path.write_text("\n".join(lines) + "\n")


def _sections(text: str) -> dict[str, list[str]]:
    """``## title`` -> its non-empty lines, from a previous report."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = out.setdefault(line, [])
        elif current is not None and line.strip():
            current.append(line)
    return out
