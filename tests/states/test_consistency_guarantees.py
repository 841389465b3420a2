"""Which consistency pairs keep exactly-once on which replication (states.cassandra.guarantees): pure, no cluster.

The property test checks the rule against an independent model of Cassandra's levels: the replicas a
request at a level waits for, and whether a write and a later read at that level, coordinated in any data
centre a service may run in, can miss each other.
"""

from __future__ import annotations

from typing import Any

import pytest
from cassandra.metadata import LocalStrategy, NetworkTopologyStrategy, SimpleStrategy
from hypothesis import given, settings
from hypothesis import strategies as st

from states.cassandra.guarantees import consistency_gap, live_replication, replicas
from states.cassandra.settings import CONSISTENCY_LEVELS, SERIAL_LEVELS


def simple(rf: int) -> dict[str, str]:
    return {"class": "SimpleStrategy", "replication_factor": str(rf)}


def nts(**dcs: int) -> dict[str, str]:
    return {"class": "NetworkTopologyStrategy", **{dc: str(n) for dc, n in dcs.items()}}


@pytest.mark.parametrize(("consistency", "serial", "replication", "local_dc"), [
    ("LOCAL_QUORUM", "LOCAL_SERIAL", simple(3), None),  # the defaults on one data centre
    ("QUORUM", "SERIAL", simple(3), None),
    ("ALL", "LOCAL_SERIAL", simple(3), None),
    ("TWO", "LOCAL_SERIAL", simple(3), None),  # 2 of 3 is a majority
    ("TWO", "SERIAL", simple(2), None),
    ("THREE", "SERIAL", simple(5), None),
    ("ONE", "LOCAL_SERIAL", simple(1), None),  # the CQL test server and single-node tests: RF 1
    ("LOCAL_ONE", "LOCAL_SERIAL", simple(1), None),
    ("LOCAL_ONE", "LOCAL_SERIAL", nts(datacenter1=1), "datacenter1"),
    ("LOCAL_QUORUM", "LOCAL_SERIAL", nts(dc1=3), None),
    ("LOCAL_QUORUM", "LOCAL_SERIAL", nts(dc1=3, dc2=0), "dc1"),  # a factor of 0 holds nothing
    ("QUORUM", "SERIAL", nts(dc1=3, dc2=3), "dc2"),
    ("EACH_QUORUM", "SERIAL", nts(dc1=3, dc2=3), None),
    ("ONE", "SERIAL", None, None),  # replication unknown: no verdict
    ("ONE", "SERIAL", {"class": "EverywhereStrategy"}, None),
    ("ONE", "SERIAL", {"class": "NetworkTopologyStrategy", "replication_factor": "3"}, None),  # DCs unknown
    ("TWO", "SERIAL", {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "3"}, None),
    ("TWO", "SERIAL", {"class": "NetworkTopologyStrategy", "dc1": "3/1"}, None),  # transient: 3 replicas
])
def test_pairs_that_keep_exactly_once_pass(consistency: str, serial: str, replication: Any,
                                           local_dc: str | None) -> None:
    assert consistency_gap(consistency, serial, replication, local_dc) is None


@pytest.mark.parametrize(("consistency", "serial", "replication", "local_dc", "setting", "needles"), [
    ("ONE", "LOCAL_SERIAL", simple(3), None, "consistency", ["ONE waits for 1 of the 3 replicas", "majority (2)"]),
    ("LOCAL_ONE", "LOCAL_SERIAL", nts(dc1=3), "dc1", "consistency", ["LOCAL_ONE waits for 1 of the 3"]),
    ("TWO", "SERIAL", simple(4), None, "consistency", ["TWO waits for 2 of the 4 replicas", "majority (3)"]),
    ("THREE", "SERIAL", nts(dc1=3, dc2=3), "dc1", "consistency", ["THREE waits for 3 of the 6"]),
    ("ONE", "SERIAL", nts(dc1=1, dc2=1), "dc1", "consistency", ["ONE waits for 1 of the 2"]),
    ("LOCAL_QUORUM", "SERIAL", nts(dc1=3, dc2=3), "dc1", "consistency",
     ["local data centre only", "2 data centres (dc1: 3, dc2: 3, ", "use QUORUM"]),
    ("LOCAL_QUORUM", "SERIAL", nts(dc1=3, dc2=3), None, "consistency", ["local data centre only"]),
    ("LOCAL_ONE", "SERIAL", nts(dc1=1, dc2=1), "dc1", "consistency", ["local data centre only"]),
    ("QUORUM", "LOCAL_SERIAL", nts(dc1=3, dc2=3), "dc1", "serial_consistency",
     ["LOCAL_SERIAL runs Paxos among one data centre's replicas", "use SERIAL"]),
])
def test_pairs_that_lose_exactly_once_are_waivable_gaps(consistency: str, serial: str, replication: Any,
                                                        local_dc: str | None, setting: str,
                                                        needles: list[str]) -> None:
    gap = consistency_gap(consistency, serial, replication, local_dc, "from cassandra.replication")
    assert gap is not None
    assert (gap.setting, gap.waivable) == (setting, True)
    assert "\n" not in gap.reason
    assert "from cassandra.replication" in gap.reason
    for n in needles:
        assert n in gap.reason, gap.reason


@pytest.mark.parametrize(("consistency", "serial", "replication", "local_dc", "setting", "needle"), [
    ("ANY", "SERIAL", simple(1), None, "consistency", "Cassandra refuses reads at ANY"),
    ("ANY", "SERIAL", None, None, "consistency", "Cassandra refuses reads at ANY"),  # whatever the replication
    ("THREE", "SERIAL", simple(2), None, "consistency", "THREE waits for 3 replicas and the keyspace keeps 2"),
    ("TWO", "SERIAL", simple(1), None, "consistency", "every request would fail"),
    ("LOCAL_QUORUM", "SERIAL", nts(dc1=3), "dc2", "consistency", "local data centre 'dc2', which holds none"),
    ("QUORUM", "LOCAL_SERIAL", nts(dc1=3), "dc2", "serial_consistency", "'dc2', which holds none"),
    ("EACH_QUORUM", "SERIAL", simple(3), None, "consistency", "EACH_QUORUM needs NetworkTopologyStrategy"),
    ("QUORUM", "SERIAL", nts(dc1=0), None, "consistency", "no replica"),
])
def test_levels_that_can_never_work_are_not_waivable(consistency: str, serial: str, replication: Any,
                                                     local_dc: str | None, setting: str, needle: str) -> None:
    gap = consistency_gap(consistency, serial, replication, local_dc)
    assert gap is not None
    assert (gap.setting, gap.waivable) == (setting, False)
    assert needle in gap.reason, gap.reason


def test_replicas_reads_both_strategies_and_nothing_else() -> None:
    assert replicas(simple(3)) == {"": 3}
    assert replicas((("class", "NetworkTopologyStrategy"), ("dc1", "3"), ("dc2", "2"))) == {"dc1": 3, "dc2": 2}
    assert replicas({"class": "SimpleStrategy", "replication_factor": "three"}) is None
    assert replicas({"class": "LocalStrategy"}) is None
    assert replicas({}) is None


def test_the_drivers_metadata_reads_as_replication_options() -> None:
    """The keyspace as the driver's cluster metadata holds it becomes the same options a config writes."""
    assert live_replication(SimpleStrategy({"replication_factor": "3"})) == simple(3)
    assert live_replication(NetworkTopologyStrategy({"dc1": "3", "dc2": "2"})) == nts(dc1=3, dc2=2)
    assert live_replication(LocalStrategy({})) is None
    assert live_replication(None) is None


# -- the rule against a model of Cassandra's levels ---------------------------------------------------------

def _needs(level: str, held: dict[str, int], coordinator: str) -> tuple[dict[str, int], int]:
    """(minimum replicas per data centre, minimum replicas in all) a request at ``level`` waits for."""
    total = sum(held.values())
    counts = {"ONE": 1, "TWO": 2, "THREE": 3, "QUORUM": total // 2 + 1, "ALL": total}
    if level in counts:
        return (dict(held) if level == "ALL" else {}), counts[level]
    if level == "EACH_QUORUM":
        return {dc: n // 2 + 1 for dc, n in held.items()}, 0
    local = held.get(coordinator, 0)
    return {coordinator: 1 if level == "LOCAL_ONE" else local // 2 + 1}, 0


def _possible(held: dict[str, int], need: tuple[dict[str, int], int]) -> bool:
    per_dc, overall = need
    return all(per_dc.get(dc, 0) <= held.get(dc, 0) for dc in per_dc) and overall <= sum(held.values())


def _can_miss(held: dict[str, int], write: tuple[dict[str, int], int], read: tuple[dict[str, int], int]) -> bool:
    """Whether a write and a read can be acknowledged by disjoint replica sets."""
    slack = 0
    for dc, n in held.items():
        used = write[0].get(dc, 0) + read[0].get(dc, 0)
        if used > n:
            return False
        slack += n - used
    short = max(0, write[1] - sum(write[0].values())) + max(0, read[1] - sum(read[0].values()))
    return short <= slack


_DC_FACTORS = st.dictionaries(st.sampled_from(["dc1", "dc2", "dc3"]), st.integers(0, 5), min_size=1, max_size=3)
_REPLICATION = st.one_of(st.integers(1, 7).map(simple), _DC_FACTORS.map(lambda d: nts(**d)))


@settings(max_examples=400, deadline=None)
@given(replication=_REPLICATION, level=st.sampled_from(sorted(CONSISTENCY_LEVELS - {"ANY"})),
       local_dc=st.sampled_from([None, "dc1", "dc2"]))
def test_the_rule_matches_a_model_of_the_levels(replication: dict[str, str], level: str,
                                                local_dc: str | None) -> None:
    """No gap: the level can be met, and a read meets every earlier write wherever either was coordinated. A weak
    gap: the level can be met, and some write and later read miss each other. A gap that is not waivable: the
    level cannot be met where the service runs."""
    factors = replicas(replication)
    assert factors is not None
    held = {dc: n for dc, n in factors.items() if n > 0}
    gap = consistency_gap(level, "SERIAL", replication, local_dc)
    if not held:
        assert gap is not None
        assert not gap.waivable
        return
    simple_ks = "" in held
    here = next(iter(held)) if simple_ks or (local_dc is None and len(held) == 1) else local_dc
    # where a service may coordinate: here; and with replicas in several data centres, in any of them
    coordinators = sorted(held) if len(held) > 1 else [here or next(iter(held))]
    met_here = here is not None and _possible(held, _needs(level, held, here))
    if gap is not None and not gap.waivable:
        assert not met_here or (level == "EACH_QUORUM" and simple_ks), gap.reason
        return
    assert met_here or here is None
    can_miss = any(_can_miss(held, _needs(level, held, a), _needs(level, held, b))
                   for a in coordinators for b in coordinators
                   if _possible(held, _needs(level, held, a)) and _possible(held, _needs(level, held, b)))
    assert (gap is not None) == can_miss, (gap, held, level, local_dc)


@settings(max_examples=200, deadline=None)
@given(replication=_REPLICATION, serial=st.sampled_from(sorted(SERIAL_LEVELS)))
def test_local_serial_is_refused_exactly_when_replicas_span_data_centres(replication: dict[str, str],
                                                                         serial: str) -> None:
    factors = replicas(replication)
    assert factors is not None
    held = {dc: n for dc, n in factors.items() if n > 0}
    gap = consistency_gap("QUORUM", serial, replication, None)
    spans = len(held) > 1
    if not held:
        return
    assert (gap is not None) == (serial == "LOCAL_SERIAL" and spans), gap
    if gap is not None:
        assert (gap.setting, gap.waivable) == ("serial_consistency", True)
