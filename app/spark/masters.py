"""Spark masters: which run on this machine only, and which state backends each of them can use.

A local master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``) runs every executor on the
driver's machine; any other (``spark://``, ``k8s://``, ``yarn``, ``mesos://``) may run them on others,
where a state kept on one machine's disk (SQLite) would be a copy of its own per executor. The
local syntax is parsed here only (:func:`parse_local`), as Spark parses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from states.factory import on_one_machine

#: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]`` (F: task attempts; Spark's own patterns allow
#: blanks around the comma); group 1 the threads, 2 F.
LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:\s*,\s*(\d+))?\])?$")


@dataclass(frozen=True, slots=True)
class LocalMaster:
    """A local master's threads (None: ``*``, this machine's cores) and task attempts (None: not given)."""

    threads: int | None = 1
    attempts: int | None = None

    def __str__(self) -> str:
        threads = "*" if self.threads is None else str(self.threads)
        return f"local[{threads}]" if self.attempts is None else f"local[{threads},{self.attempts}]"


def parse_local(master: str) -> LocalMaster | None:
    """``master`` parsed as a local master; None for any other (a cluster master)."""
    m = LOCAL_MASTER.match(master.strip())
    if m is None:
        return None
    threads, attempts = m.group(1) or "1", m.group(2)
    return LocalMaster(None if threads == "*" else int(threads), None if attempts is None else int(attempts))


def is_local(master: str) -> bool:
    """Whether ``master`` runs Spark on this machine only (every executor a thread of the driver's JVM)."""
    return parse_local(master) is not None


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
