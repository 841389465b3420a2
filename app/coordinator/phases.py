"""The phases of a txid timed into ``trident_phase_seconds``; a slow one says so in the log as it ends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from app.metrics import Metrics

log = logging.getLogger("app.coordinator")  # the coordinator's lines, under the name operators filter on

SLOW_PHASE_S = 5.0  # a phase of a txid that takes this long or longer says so when it ends
P = ParamSpec("P")
T = TypeVar("T")


class PhaseTimer:
    """Times the phases (plan, process, freeze, commit) of one topology's txids."""

    def __init__(self, topology_id: str, metrics: Metrics, clock: Callable[[], float]) -> None:
        self.topology_id, self._metrics, self._clock = topology_id, metrics, clock

    @contextmanager
    def phase(self, name: str, txid: int) -> Iterator[None]:
        """Time one phase of ``txid``; one that took :data:`SLOW_PHASE_S` or longer says so as it ends (a failed
        one has its failure's line instead)."""
        began = self._clock()
        with self._metrics.phase_seconds.labels(self.topology_id, name).time():
            yield
        took = self._clock() - began
        if took >= SLOW_PHASE_S:
            log.info("pipeline %s txid %d: %s took %.1f s", self.topology_id, txid, name, took)

    def timed(self, name: str, txid: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` timed as phase ``name`` of ``txid``."""
        with self.phase(name, txid):
            return fn(*args, **kwargs)
