"""docs/deploy-report.md: what ``make test-k8s`` ran, on which commit and Kubernetes, with its figures."""

from __future__ import annotations

import datetime
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
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        lines = ["# Deployment report: `helm install` on a real Kubernetes", "",
                 "Written by `make test-k8s` (tests/k8s). Each scenario installs the chart with the image built from",
                 "this commit's Dockerfile, produces records while it disturbs the pods, then compares the stored",
                 "state with the producer's truth key by key (`lost`, `twice`: records counted too few or too many",
                 "times; both 0 means exact).", "",
                 f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
                 f"- commit: `{commit}`{' (with uncommitted changes)' if dirty else ''}"]
        lines += [f"- {k}: {v}" for k, v in self.general.items()]
        for key in ("image", "a", "b", "d", "e", "c", "f"):
            if key not in self.scenarios:
                continue
            s = self.scenarios[key]
            lines += ["", f"## {TITLES[key]}", "", f"- outcome: **{s['outcome']}**"]
            lines += [f"- {k}: {v}" for k, v in s.items() if k != "outcome"]
        not_run = [TITLES[k] for k in ("a", "b", "d", "e", "c", "f") if k not in self.scenarios]
        if not_run:
            lines += ["", "## Not run in this report", ""] + [f"- {t}" for t in not_run]
        path.write_text("\n".join(lines) + "\n")
