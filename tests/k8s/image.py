"""Builds the project's image from its Dockerfile: ``make image`` and the Kubernetes tests use this build.

Where a realk8s cluster is up (its ``image.sh list`` answers), the image is built with its buildah on the
Debian base it provides (``image.sh base``, passed as ``BASE_IMAGE``) and loaded into the cluster's
containerd; else with Docker where an engine answers; else with plain buildah (the default base must then
be pullable). ``python -m tests.k8s.image [NAME]`` prints the name built.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
#: What the realk8s base (Debian bookworm, Python 3.11, Java 17, tini) is called in the cluster's stores.
BASE = "localhost/trident-base:bookworm"
REPOSITORY = "localhost/trident-stream"


@dataclass(frozen=True, slots=True)
class Built:
    name: str
    seconds: float
    builder: str


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def version() -> str:
    chart = yaml.safe_load((ROOT / "helm" / "trident-stream" / "Chart.yaml").read_text())
    return str(chart["appVersion"])


def default_name() -> str:
    """``localhost/trident-stream:<appVersion>-<commit>`` (``-dirty`` when the tree has changes)."""
    sha = _git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = "-dirty" if _git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{REPOSITORY}:{version()}-{sha}{dirty}"


def build_args(*, mounts: bool) -> list[str]:
    """VERSION and REVISION; with ``mounts`` (buildah), the host's ``PIP_CERT`` bundle where it has one (a
    TLS-inspecting proxy between the build and PyPI), mounted read-only into the build's RUN steps."""
    args = ["--build-arg", f"VERSION={version()}", "--build-arg", f"REVISION={_git('rev-parse', 'HEAD')}"]
    cert = os.environ.get("PIP_CERT")
    if mounts and cert and Path(cert).is_file():
        args += ["-v", f"{Path(cert).resolve()}:/run/pip-cert.pem:ro", "--build-arg", "PIP_CERT=/run/pip-cert.pem"]
    return args


def realk8s_up(home: Path | None, env: dict[str, str] | None = None) -> bool:
    """Whether a realk8s cluster's containerd answers (``image.sh list``)."""
    if home is None:
        return False
    out = subprocess.run([str(home / "image.sh"), "list"], env=env, capture_output=True, timeout=60, check=False)
    return out.returncode == 0


def build(name: str, *, realk8s: Path | None = None, env: dict[str, str] | None = None) -> Built:
    """Build ``name`` with the first builder that works here (see the module's docstring)."""
    t0 = time.monotonic()
    if realk8s_up(realk8s, env):
        assert realk8s is not None
        for args in (["base", BASE], ["build", str(ROOT), name, "--build-arg", f"BASE_IMAGE={BASE}",
                                                         *build_args(mounts=True)]):
            subprocess.run([str(realk8s / "image.sh"), *args], env=env, check=True, timeout=3600,
                           stdout=sys.stderr)
        return Built(name, time.monotonic() - t0, "realk8s buildah")
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True, timeout=30, check=False).returncode == 0:
        subprocess.run([docker, "build", "-t", name, *build_args(mounts=False), str(ROOT)], check=True, timeout=3600)
        return Built(name, time.monotonic() - t0, "docker")
    buildah = shutil.which("buildah")
    if buildah is None:
        raise FileNotFoundError("no builder: start a realk8s cluster, or install Docker or buildah")
    subprocess.run([buildah, "bud", "--layers", "-t", name, *build_args(mounts=True), str(ROOT)], check=True, timeout=3600)
    return Built(name, time.monotonic() - t0, "buildah")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s.image", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", help=f"image name (default {REPOSITORY}:<appVersion>-<commit>)")
    args = parser.parse_args(argv)
    from tests.k8s.kit import folder

    try:
        home: Path | None = folder()
    except FileNotFoundError:
        home = None
    built = build(args.name or default_name(), realk8s=home)
    print(f"built {built.name} with {built.builder} in {built.seconds:.0f} s", file=sys.stderr)
    print(built.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
