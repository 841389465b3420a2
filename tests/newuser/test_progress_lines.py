"""What the coordinator says while a user waits: each txid as it is planned, each phase that was slow."""

from __future__ import annotations

import logging
from typing import Any

from spouts.planner import Caps
from spouts.protocols import SpoutKind
from states.spec import StateKind
from tests.app.harness import World


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def slow_processing(world: World, seconds: float) -> Clock:
    """The coordinator's clock, moved ``seconds`` on by every txid's processing."""
    clock, coord = Clock(), world.coordinator
    process = coord.executor.process

    def slow(batch: Any) -> Any:
        clock.now += seconds
        return process(batch)

    coord._clock = coord._phases._clock = clock
    coord.executor.process = slow  # type: ignore[method-assign]
    return clock


def test_a_txid_says_its_plan_and_its_slow_phase_each_naming_the_pipeline(caplog: Any) -> None:
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=3, caps=Caps(per_partition=100, per_batch=100))
    for k in "abcde":
        world.append(0, k)
    world.append(2, "f")
    slow_processing(world, 7.0)
    caplog.set_level(logging.INFO, logger="app.coordinator")
    assert world.coordinator.step() == "committed"
    lines = [r.getMessage() for r in caplog.records if r.name == "app.coordinator"]
    assert lines == ["pipeline world txid 1: planned 6 records from 2 of 3 partitions",
                     "pipeline world txid 1: process took 7.0 s"]


def test_a_quick_txid_has_only_its_plan_line_and_a_replay_says_its_attempt(caplog: Any) -> None:
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=100, per_batch=100))
    for k in "ab":
        world.append(0, k)
    slow_processing(world, 0.5)
    world.faults.armed = {"commit"}
    caplog.set_level(logging.INFO, logger="app.coordinator")
    assert world.coordinator.step() == "failed"
    world.heal()
    assert world.coordinator.step() == "committed"
    lines = [r.getMessage() for r in caplog.records if r.name == "app.coordinator"]
    assert lines[0] == "pipeline world txid 1: planned 2 records from 1 of 1 partitions"
    assert "pipeline world txid 1: planned 2 records from 1 of 1 partitions (attempt 2, its frozen plan)" in lines
    assert not any("took" in line for line in lines), lines
    assert all(line.startswith("pipeline world") for line in lines), lines
