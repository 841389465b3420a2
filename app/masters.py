"""Spark masters: which run on this machine only, and which state backends each of them can use.

A local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``) runs every executor on the
driver's machine; any other (``spark://``, ``k8s://``, ``yarn``, ``mesos://``) may run them on others,
where a state kept on one machine's disk (SQLite) would be a copy of its own per executor.
"""

from __future__ import annotations

import re

from states.factory import on_one_machine

#: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]`` (F: task attempts); group 1 the threads, 2 F.
LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*(\d+))?\])?$")


def is_local(master: str) -> bool:
    """Whether ``master`` runs Spark on this machine only (every executor a thread of the driver's JVM)."""
    return LOCAL_MASTER.match(master.strip()) is not None


def state_refusal(backend: str, master: str) -> str | None:
    """Why a ``backend`` state cannot be used with ``master`` (None: it can).

    A backend on one machine's disk is for local masters: on a cluster each executor would write a
    file of its own on its own machine (or work directory), and the state would split between them."""
    if is_local(master) or not on_one_machine(backend):
        return None
    return (f"state backend {backend} keeps the state on one machine, but spark.master {master} runs "
            f"executors on other machines (each would write a copy of its own and the counts would split "
            f"between them): use backend cassandra with a cluster master, or a local master "
            f"(local[*]) with {backend}")
