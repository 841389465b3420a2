"""Spark sized to the container: ``local[*]`` from the CPU limit, the driver heap from the memory limit,
read from cgroup v2 and v1 files (written here as a container would show them)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client import CollectorRegistry

import app.service.process
import app.spark.session
from app.config import loads
from app.metrics import Metrics
from app.service.pod_resources import cpu_limit, memory_limit, sized_spark

GIB = 1 << 30


def v2(root: Path, cpu: str, memory: str) -> Path:
    (root / "cpu.max").write_text(cpu + "\n")
    (root / "memory.max").write_text(memory + "\n")
    return root


def v1(root: Path, quota: int, period: int, memory: int) -> Path:
    (root / "cpu").mkdir()
    (root / "memory").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(f"{period}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{memory}\n")
    return root


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    root = v2(tmp_path, "250000 100000", str(3 * GIB))
    assert cpu_limit(root) == 2.5
    assert memory_limit(root) == 3 * GIB


def test_cgroup_v1_limits_and_unlimited(tmp_path: Path) -> None:
    root = v1(tmp_path, 150000, 100000, 2 * GIB)
    assert cpu_limit(root) == 1.5
    assert memory_limit(root) == 2 * GIB
    (tmp_path / "unlimited").mkdir()
    unlimited = v1(tmp_path / "unlimited", -1, 100000, 9223372036854771712)  # what v1 shows without limits
    assert cpu_limit(unlimited) is None
    assert memory_limit(unlimited) is None


def test_no_cgroup_files_no_limits(tmp_path: Path) -> None:
    assert cpu_limit(tmp_path) is None
    assert memory_limit(tmp_path) is None
    assert sized_spark("local[*]", {}, tmp_path) == ("local[*]", {}, [])


@pytest.mark.parametrize(("master", "expected"), [
    ("local[*]", "local[3]"),           # 2.5 cores rounded up
    ("local[*, 2]", "local[3,2]"),      # the task attempts kept
    ("local[8]", "local[8]"),           # the config's own N wins
    ("k8s://https://kubernetes.default.svc:443", "k8s://https://kubernetes.default.svc:443"),
])
def test_local_star_follows_the_cpu_limit(tmp_path: Path, master: str, expected: str) -> None:
    assert sized_spark(master, {}, v2(tmp_path, "250000 100000", "max"))[0] == expected


def test_driver_memory_is_half_the_limit_unless_configured(tmp_path: Path) -> None:
    root = v2(tmp_path, "max", str(3 * GIB))
    master, conf, changed = sized_spark("local[*]", {"spark.sql.shuffle.partitions": "4"}, root)
    assert master == "local[*]"  # no CPU limit: the machine's cores
    assert conf == {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1536m"}
    assert len(changed) == 1
    assert "3072 MiB memory limit" in changed[0]
    assert sized_spark("local[*]", {"spark.driver.memory": "2g"}, root)[1] == {"spark.driver.memory": "2g"}


def test_the_service_starts_spark_sized_to_its_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Service`` hands Spark the sized master and driver memory (the cgroup here: 2 cores, 4 GiB)."""
    root = v2(tmp_path, "200000 100000", str(4 * GIB))
    monkeypatch.setattr(app.service.process, "sized_spark", lambda master, conf: sized_spark(master, conf, root))
    started: dict[str, object] = {}
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))  # what the service reads of it
    monkeypatch.setattr(app.spark.session, "spark_session", lambda **kwargs: started.update(kwargs) or spark)
    doc = {"kafka": {"bootstrap_servers": "k:9092"}, "spark": {"conf": {"spark.sql.shuffle.partitions": 2}},
           "pipelines": [{"id": "p", "spout": {"topics": ["t"]}, "group_by": ["w"],
                          "transforms": [{"map": ["CAST(value AS STRING) AS w"]}], "aggregates": [{"count": {"as": "n"}}],
                          "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"), "table": "t"}}]}
    service = app.service.process.Service(loads(yaml.safe_dump(doc)), metrics=Metrics(CollectorRegistry()))
    service._start_spark()
    assert started["master"] == "local[2]"
    assert started["conf"] == {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2048m"}


@pytest.mark.parametrize("master", ["local[* ,2]", "local[*\t, 2]", "local[ *]", "local[*]x", "spark://h:7077"])
def test_the_sizing_and_the_master_check_read_the_local_syntax_alike(tmp_path: Path, master: str) -> None:
    """Spark's syntax, parsed in one place: a master is resized only when it is a local ``*`` master, with the
    blanks Spark allows around the comma."""
    from app.spark.masters import is_local, parse_local

    resized = sized_spark(master, {}, v2(tmp_path, "250000 100000", "max"))[0] != master
    parsed = parse_local(master)
    assert resized == (is_local(master) and parsed is not None and parsed.threads is None)
    assert is_local(master) == (master in ("local[* ,2]", "local[*\t, 2]"))
