"""The dead-letter check of an audit, on its own: which letters count, and which absences or copies differ."""

from __future__ import annotations

from collections import Counter

from app.audit.dead_letters import check
from spouts.metadata import BatchPlan, Partition, PartitionMetadata

PLAN = BatchPlan(9, {Partition("t", 0): PartitionMetadata("t", 0, 10, 20, 10, "p"),
                     Partition("t", 1): PartitionMetadata("t", 1, 0, 5, 5, "p")})


def test_letters_outside_the_audited_ranges_are_left_aside_and_each_difference_is_named() -> None:
    letters = Counter({("t", 0, 12): 1, ("t", 0, 15): 2, ("t", 1, 3): 1, ("t", 0, 25): 1, ("u", 0, 12): 1,
                       ("t", 0, 9): 1})
    found = check("dead_letter", "dlq", [("t", 0, 12), ("t", 0, 15), ("t", 0, 17)], plan=PLAN, letters=letters,
                  log_start={0: 0})
    assert found.in_topic == 4  # 12, 15 twice, 1:3; not 0:25 nor 0:9 (outside the ranges) nor topic u
    assert found.missing == [("t", 0, 17)]
    assert found.twice == {("t", 0, 15): 2}
    assert found.unexpected == [("t", 1, 3)]
    assert found.differences == 3


def test_a_topic_that_lost_its_start_makes_absences_unverifiable_and_a_rewind_makes_copies_expected() -> None:
    letters = Counter({("t", 0, 15): 2})
    found = check("dead_letter", "dlq", [("t", 0, 15), ("t", 0, 17)], plan=PLAN, letters=letters,
                  log_start={0: 4, 1: 0}, rewound=True)
    assert (found.missing, found.unverifiable, found.log_start) == ([], 1, {0: 4})
    assert (found.twice, found.rewound_copies, found.differences) == ({}, 1, 0)


def test_skip_counts_the_bad_records_as_skipped_and_reads_no_topic() -> None:
    found = check("skip", None, [("t", 0, 12), ("t", 0, 12), ("t", 1, 1)], plan=PLAN, letters=Counter(),
                  log_start={})
    assert (found.bad, found.skipped, found.differences, found.in_topic) == (2, 2, 0, 0)
