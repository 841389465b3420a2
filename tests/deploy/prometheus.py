"""A real Prometheus server (Debian's ``prometheus``) on a loopback port, scraping given targets every
second, and the dashboard's panel queries with Grafana's variables substituted."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Self

import yaml

from tests.service.helpers import free_port

#: Grafana's variables as the dashboard is shown with the namespace, instance and pipeline variables on
#: "All" (their allValue).
GRAFANA_VARIABLES = {"$__rate_interval": "20s", "$__interval": "1s", "$__range": "5m", "$pipeline": ".*",
                     "$namespace": ".*", "$instance": ".*"}


class PrometheusServer:
    """``prometheus`` with a 1 s scrape interval over ``targets`` and the given rule files, in ``workdir``."""

    def __init__(self, binary: str, targets: list[str], rule_files: list[Path], workdir: Path) -> None:
        self.binary, self.workdir = binary, workdir
        self.port = free_port()
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": "trident-stream", "static_configs": [{"targets": targets}]}],
        }))
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        with open(self.log, "wb") as out:  # noqa: PTH123  a plain open() of a log path
            self.proc = subprocess.Popen([self.binary, f"--config.file={self.config}",
                                          f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                                          f"--web.listen-address=127.0.0.1:{self.port}"],
                                         stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self._ready():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"prometheus not ready in 30 s:\n{self.log.read_text()}"
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the ``data`` of a successful answer."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL with the Grafana variables substituted) for every target of every panel."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"unsubstituted variable in {panel['title']}: {expr}"
            out.append((panel["title"], expr))
    return out
