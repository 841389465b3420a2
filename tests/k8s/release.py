"""One Helm release of the chart in a namespace of its own, and what the tests ask of its pods.

Pods are reached from the host at their IPs (the node's bridge routes to them): ``/readyz`` and
``/healthz`` of each pod tell its role and committed txid.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.k8s.kit import ROOT, Cluster

CHART = ROOT / "helm" / "trident-stream"
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout: float, every: float = 1.0) -> T:
    """The first truthy result of ``check`` within ``timeout`` seconds; else AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except (OSError, RuntimeError, ValueError) as e:  # a pod or server not answering yet
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(every)


def http_json(url: str, timeout: float = 5) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


@dataclass
class Release:
    cluster: Cluster
    name: str
    namespace: str
    workdir: Path
    values: dict[str, Any] = field(default_factory=dict)

    def _values_file(self, values: dict[str, Any]) -> Path:
        path = self.workdir / f"{self.name}-values-{int(time.time() * 1000)}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        return path

    def install(self, values: dict[str, Any], *extra: str) -> str:
        self.values = values
        self.cluster.kubectl("create", "namespace", self.namespace, check=False)
        return self.cluster.helm("install", self.name, str(CHART), "-f", str(self._values_file(values)),
                                 "-n", self.namespace, *extra)

    def upgrade(self, values: dict[str, Any], *extra: str) -> str:
        self.values = values
        return self.cluster.helm("upgrade", self.name, str(CHART), "-f", str(self._values_file(values)),
                                 "-n", self.namespace, *extra)

    def uninstall(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.cluster.helm("uninstall", self.name, "-n", self.namespace, "--wait", timeout=300)
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=true", timeout=300, check=False)

    # -- pods ------------------------------------------------------------------------------------

    def pods(self, component: str = "coordinator", running: bool = True) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        items = self.cluster.json("get", "pods", "-n", self.namespace, "-l", selector)["items"]
        if running:
            items = [p for p in items if p["status"].get("phase") == "Running" and p["status"].get("podIP")
                     and "deletionTimestamp" not in p["metadata"]]
        return list(items)

    def readyz(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod's /readyz body (its status code under ``http_status``)."""
        status, body = http_json(f"http://{pod['status']['podIP']}:9400/readyz")
        if not isinstance(body, dict):
            raise ValueError(f"/readyz of {pod['metadata']['name']}: {status} {body!r}")  # noqa: TRY004  a bad answer is a ValueError here
        return {**body, "http_status": status}

    def pipeline(self, pod: dict[str, Any], pipeline: str) -> dict[str, Any]:
        return dict(self.readyz(pod)["pipelines"][pipeline])

    def active(self, pipeline: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The pod whose pipeline is active (holds the lease and steps) and its status; None if none is."""
        for pod in self.pods():
            try:
                status = self.pipeline(pod, pipeline)
            except (OSError, ValueError, KeyError):
                continue
            if status.get("role") == "active" and status.get("committed_txid") is not None:
                return pod, status
        return None

    def committed(self, pipeline: str) -> int:
        found = self.active(pipeline)
        return -1 if found is None else int(found[1]["committed_txid"] or 0)

    def logs(self, pod: str, tail: int = 60) -> str:
        return self.cluster.kubectl("logs", "-n", self.namespace, pod, f"--tail={tail}", "--all-containers",
                                    check=False).stdout

    def events(self) -> str:
        return self.cluster.kubectl("get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp",
                                    check=False).stdout[-4000:]
