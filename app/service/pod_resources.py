"""What the container may use, read from its cgroup (a Kubernetes pod's limits, ``docker run --cpus``).

A local Spark master ``local[*]`` means "this machine's cores", which in a container is the node's,
not the pod's CPU limit: N threads on a limit of fewer cores only queue for the CPU and multiply
memory (a Python worker per task). And the driver's JVM heap, left to Spark's default, ignores the
container's memory limit. :func:`sized_spark` turns the limits into ``local[N]`` and a
``spark.driver.memory`` share of the limit, where the config does not say otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from app.spark.masters import parse_local

CGROUP = Path("/sys/fs/cgroup")
#: The driver JVM's heap as a share of the container's memory limit; the rest is the JVM's off-heap
#: (metaspace, threads, Arrow buffers), the Python driver and, in local mode, a Python worker per task.
DRIVER_HEAP_SHARE = 0.5
_UNLIMITED_V1 = 1 << 60  # cgroup v1 reports "no limit" as a page-rounded maximum of about 2**63


def cpu_limit(root: Path = CGROUP) -> float | None:
    """The CPU quota in cores (cgroup v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``); None: no limit."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return None if quota == "max" else int(quota) / int(period or "100000")
    quota_v1, period_v1 = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
    if quota_v1 is None or period_v1 is None or int(quota_v1) <= 0:
        return None
    return int(quota_v1) / int(period_v1)


def memory_limit(root: Path = CGROUP) -> int | None:
    """The memory limit in bytes (cgroup v2 ``memory.max``, else v1 ``memory.limit_in_bytes``); None: no limit."""
    v2 = _read(root / "memory.max")
    if v2 is not None:
        return None if v2 == "max" else int(v2)
    v1 = _read(root / "memory" / "memory.limit_in_bytes")
    return None if v1 is None or int(v1) >= _UNLIMITED_V1 else int(v1)


def sized_spark(master: str, conf: Mapping[str, str], root: Path = CGROUP) -> tuple[str, dict[str, str], list[str]]:
    """``(master, conf, what changed)``: ``local[*]`` becomes ``local[N]`` for a CPU limit of N cores
    (rounded up), and ``spark.driver.memory`` a :data:`DRIVER_HEAP_SHARE` of the memory limit, each only
    where the config leaves it open and the container has the limit."""
    out, changed = dict(conf), []
    local = parse_local(master)
    cores = cpu_limit(root)
    if local is not None and local.threads is None and cores is not None:  # local[*]: the machine's cores
        master = str(replace(local, threads=max(1, math.ceil(cores - 1e-9))))
        changed.append(f"master {master} (CPU limit {cores:g} cores)")
    memory = memory_limit(root)
    if "spark.driver.memory" not in out and memory is not None:
        heap_mib = max(256, int(memory * DRIVER_HEAP_SHARE) // (1 << 20))
        out["spark.driver.memory"] = f"{heap_mib}m"
        changed.append(f"spark.driver.memory {heap_mib}m ({DRIVER_HEAP_SHARE:.0%} of the {memory >> 20} MiB memory limit)")
    return master, out, changed


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
