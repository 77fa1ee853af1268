"""Overlap decisions: allow, skip and buffer_one, as a pure function of the job's counts."""

from __future__ import annotations

import pytest

from tickwheel.schedule import OverlapDecision, ScheduleError, decide_overlap

pytestmark = pytest.mark.unit

RUN, SKIP, BUFFER = OverlapDecision.RUN, OverlapDecision.SKIP, OverlapDecision.BUFFER


@pytest.mark.parametrize(
    ("policy", "running", "buffered", "decision"),
    [
        ("allow", 0, 0, RUN),
        ("allow", 3, 0, RUN),
        ("skip", 0, 0, RUN),
        ("skip", 1, 0, SKIP),
        ("skip", 2, 0, SKIP),
        ("buffer_one", 0, 0, RUN),
        ("buffer_one", 1, 0, BUFFER),
        ("buffer_one", 1, 1, SKIP),
        ("buffer_one", 0, 1, SKIP),
    ],
)
def test_overlap_decision_table(
    policy: str, running: int, buffered: int, decision: OverlapDecision
) -> None:
    """Each policy and state of the job gives the documented decision."""
    assert decide_overlap(policy, running, buffered) is decision


def test_unknown_policy_names_field_and_choices() -> None:
    """An unknown overlap policy is ScheduleError('overlap') listing the allowed ones."""
    with pytest.raises(ScheduleError, match=r"^overlap must be one of allow, skip, buffer_one"):
        decide_overlap("queue", 0, 0)


def test_negative_counts_are_a_programming_error() -> None:
    """Negative running/buffered counts raise ValueError."""
    with pytest.raises(ValueError, match=r"must be >= 0"):
        decide_overlap("allow", -1, 0)
