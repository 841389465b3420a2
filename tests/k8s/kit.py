"""Drives a realk8s cluster: start it, build and load images, make volumes, expose host ports, install charts.

The realk8s folder (``up.sh``, ``image.sh``, ``pv.sh``, ``expose.sh``, ``helm.sh``) is ``REALK8S_DIR`` or
``shared/realk8s`` beside the clone. :class:`Cluster` keeps the exports ``up.sh --env`` printed and runs
kubectl with them; nothing here knows the product.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def folder() -> Path:
    """The realk8s folder: ``REALK8S_DIR`` when set, else ``shared/realk8s`` beside the clone."""
    named = os.environ.get("REALK8S_DIR")
    home = Path(named) if named else ROOT.parent / "shared" / "realk8s"
    if not os.access(home / "up.sh", os.X_OK):
        raise FileNotFoundError(f"no realk8s folder at {home} (up.sh): put shared/realk8s beside the clone "
                                "or set REALK8S_DIR")
    return home.resolve()


def _exports(text: str) -> dict[str, str]:
    """``export A=1 B=2`` lines (as ``up.sh --env`` prints them) as a mapping; ``"$PATH"`` expanded."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export "):
            for name, value in re.findall(r'(\w+)=("[^"]*"|\S+)', line[len("export "):]):
                value = value.replace('"', "")  # noqa: PLW2901  the line normalized in place
                out[name] = value.replace("$PATH", os.environ.get("PATH", ""))
    return out


@dataclass
class Cluster:
    """A running realk8s cluster, its exports and the seconds ``up.sh`` took."""

    home: Path
    env: dict[str, str]
    up_seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def up(cls) -> Cluster:
        """``up.sh --env``: starts the cluster (building what its cache lacks) or reuses the running one."""
        home = folder()
        t0 = time.monotonic()
        out = subprocess.run([str(home / "up.sh"), "--env"], stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
                             check=False, timeout=5400)
        if out.returncode != 0:
            raise RuntimeError(f"realk8s up.sh failed with {out.returncode}")
        return cls(home, {**os.environ, **_exports(out.stdout)}, up_seconds=time.monotonic() - t0)

    @property
    def node_ip(self) -> str:
        return self.env["REALK8S_NODE_IP"]

    @property
    def data(self) -> Path:
        return Path(self.env["REALK8S_DATA"])

    def script(self, name: str, *args: str, timeout: float = 900, capture: bool = True) -> str:
        """Run one of the folder's scripts with the cluster's exports; its stdout."""
        out = subprocess.run([str(self.home / name), *args], env=self.env, text=True, timeout=timeout, check=False,
                             stdout=subprocess.PIPE if capture else sys.stderr, stderr=sys.stderr)
        if out.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} failed with {out.returncode}")
        return out.stdout or ""

    def kubectl(self, *args: str, timeout: float = 120, check: bool = True, input: str | None = None,  # noqa: A002  the name the mirrored API uses
                ) -> subprocess.CompletedProcess[str]:
        kubectl = self.env.get("REALK8S_KUBECTL", "kubectl")
        out = subprocess.run([kubectl, *args], env=self.env, text=True, capture_output=True, timeout=timeout,
                             check=False, input=input)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def version(self) -> str:
        return str(self.json("version")["serverVersion"]["gitVersion"])

    def helm(self, verb: str, *args: str, timeout: float = 900) -> str:
        return self.script("helm.sh", verb, *args, timeout=timeout)

    def volume(self, name: str, size: str, claim: str, owner: str = "10001:10001") -> Path:
        """A static PersistentVolume bound to ``claim`` (namespace/name); its host directory."""
        self.script("pv.sh", "--delete", name, timeout=60) if (self.data / "pv" / name).exists() else None
        self.script("pv.sh", name, size, "--claim", claim, "--owner", owner, timeout=60)
        return self.data / "pv" / name

    def expose(self, port: int) -> str:
        """Pods reach the host's ``127.0.0.1:port`` at the returned ``node-ip:port``."""
        return self.script("expose.sh", str(port), timeout=60).strip()

    def unexpose(self, port: int) -> None:
        self.script("expose.sh", str(port), "--stop", timeout=60)

    def images(self) -> list[str]:
        return self.script("image.sh", "list", timeout=120).split()


if __name__ == "__main__":  # `python3 -m tests.k8s.kit where`: the realk8s folder, or exit 1 saying why
    if sys.argv[1:] != ["where"]:
        sys.exit("usage: python3 -m tests.k8s.kit where")
    try:
        print(folder())
    except FileNotFoundError as e:
        sys.exit(str(e))
