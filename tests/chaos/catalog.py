"""Every scenario by name: its function, the options of its lane, what it injects, and its lane class."""

from __future__ import annotations

from tests.chaos import bad_records, real
from tests.chaos.lane import Lane
from tests.chaos.scenarios import SCENARIOS as _FAULTS

SCENARIOS = {**_FAULTS, "bad-records": bad_records.SCENARIO, "real": real.SCENARIO}
LANES: dict[str, type[Lane]] = {"bad-records": bad_records.BadRecordsLane, "real": real.RealServersLane}


def lane_class(name: str) -> type[Lane]:
    return LANES.get(name, Lane)


def error_policy_built() -> bool:
    """Whether this build has the error policy the bad-records scenario needs (``errors:`` per pipeline)."""
    from app.config.schema.pipeline import PipelineModel

    return "errors" in PipelineModel.model_fields
