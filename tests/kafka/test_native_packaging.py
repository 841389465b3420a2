"""The native reader in a built package: ``pip wheel .`` (and so ``pip install .``) compiles it into the wheel where a
C compiler and librdkafka's headers are at hand, and builds a wheel without it where they are not (the service then
reads through confluent-kafka and says so at start-up: see ``test_a_spout_says_how_its_reads_read``).

Each builds a wheel from a copy of the sources (pip's isolated build: setuptools from the index or pip's cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.kafka.native_fixtures import native_built  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]
ROOT = Path(__file__).resolve().parents[2]
IN_WHEEL = "spouts/kafka/native/_rangeread.so"


def _wheel(tmp_path: Path, **env: str) -> Path:
    """A wheel of a copy of the project's sources (no build products, no in-place library) built with ``env``."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, src / name)
    for package in ("app", "spouts", "states"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"),
                           str(src)], env={**os.environ, **env}, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


_LOADS = """
import pathlib, sys
from spouts.kafka import native
native.LIBRARY = pathlib.Path(sys.argv[1])
print(native.available())
"""


@pytest.mark.timeout(900)
def test_a_wheel_holds_the_native_reader_and_it_loads_beside_confluent_kafka(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    assert "-linux_" in wheel.name, wheel.name  # a platform wheel: it holds a shared library
    with zipfile.ZipFile(wheel) as z:
        assert IN_WHEEL in z.namelist(), z.namelist()
        library = Path(z.extract(IN_WHEEL, tmp_path / "unpacked"))
    # built without this tree's confluent-kafka: it loads into the librdkafka this environment's confluent-kafka has
    said = subprocess.run([sys.executable, "-c", _LOADS, str(library)], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT)
    assert said.stdout.strip() == "None", (said.stdout, said.stderr[-2000:])


@pytest.mark.timeout(900)
def test_without_a_compiler_the_wheel_builds_without_the_native_reader(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, CC="false")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert IN_WHEEL not in names
    assert "spouts/kafka/native/__init__.py" in names
    assert "spouts/kafka/native/rangeread.c" in names  # rebuildable from the installed package (build.sh beside it)
