"""What ``/readyz`` and ``trident_pipeline_state`` say about one pipeline, decided from plain facts.

States: ``standby`` (no lease: another instance works), ``active`` (holds the lease and makes
progress), ``degraded`` (holds the lease but cannot make progress now: a transient failure, a
missing topic, or no step finished within the ready window; with the reason and since when),
``failed`` (stopped by a permanent failure; with the error). Ready only when active.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class PipelineState(enum.StrEnum):
    STANDBY = "standby"
    ACTIVE = "active"
    DEGRADED = "degraded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Health:
    """One pipeline's state, with why (``reason``) and since when (``since``, wall-clock seconds)."""

    state: PipelineState
    reason: str | None = None
    since: float | None = None

    @property
    def ready(self) -> bool:
        return self.state is PipelineState.ACTIVE

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state.value, "reason": self.reason, "since": self.since}


def assess(*, active: bool, error: str | None, failing: tuple[str, float] | None, source_problem: str | None,  # noqa: PLR0911  ordered cases, the first that holds decides
           progress_age_s: float | None, window_s: float, now: float,
           source_problem_since: float | None = None) -> Health:
    """The health of a pipeline from what its runner knows.

    ``failing`` is the current transient failure (reason, since); ``source_problem`` what the
    spout reports (e.g. a topic that does not exist), first seen at ``source_problem_since``; ``progress_age_s`` the seconds since the
    last commit or idle step (None: none yet).
    """
    if error is not None:
        return Health(PipelineState.FAILED, error)
    if not active:
        return Health(PipelineState.STANDBY)
    if failing is not None:
        return Health(PipelineState.DEGRADED, failing[0], failing[1])
    if source_problem is not None:
        return Health(PipelineState.DEGRADED, source_problem, source_problem_since)
    if progress_age_s is None:
        return Health(PipelineState.DEGRADED, "no step has finished yet")
    if progress_age_s > window_s:
        return Health(PipelineState.DEGRADED, f"no commit or idle step for {progress_age_s:.0f} s "
                                              f"(the ready window is {window_s:.0f} s)", now - progress_age_s)
    return Health(PipelineState.ACTIVE)
