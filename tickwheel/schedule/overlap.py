"""Overlap of runs of one job (DESIGN §6): what to do with an occurrence while a run is going.

    allow       every occurrence runs, however many runs of the job are in flight (default)
    skip        an occurrence that comes while a run is in flight is recorded skipped
    buffer_one  it waits in a one-place buffer and starts when the running run ends; a further
                occurrence while the buffer is full is recorded skipped

The caller (the shard leader) owns the counts and the buffer; this is only the decision.
"""

from __future__ import annotations

from enum import StrEnum

from tickwheel.schedule.errors import parse_choice

REASON_OVERLAP = "overlap"  # skip reason recorded on the run


class OverlapPolicy(StrEnum):
    """A job's `overlap` setting."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"


class OverlapDecision(StrEnum):
    """What to do with the occurrence that just came due."""

    RUN = "run"  # dispatch it now
    SKIP = "skip"  # record it skipped with REASON_OVERLAP
    BUFFER = "buffer"  # hold it; dispatch when the running run finishes


def parse_overlap_policy(value: object) -> OverlapPolicy:
    """The overlap policy named `value`, or ScheduleError("overlap")."""
    return parse_choice(OverlapPolicy, value, "overlap")


def decide_overlap(policy: str, running: int, buffered: int) -> OverlapDecision:
    """The decision for a due occurrence, given the job's runs in flight and already buffered.

    Under `buffer_one` a buffered run counts as occupying the job even when nothing is running
    (it is about to start), so a new occurrence then is skipped rather than run beside it.
    """
    mode = parse_overlap_policy(policy)
    if running < 0 or buffered < 0:
        raise ValueError(f"running ({running}) and buffered ({buffered}) must be >= 0")
    if mode is OverlapPolicy.ALLOW:
        return OverlapDecision.RUN
    if mode is OverlapPolicy.SKIP:
        return OverlapDecision.RUN if running == 0 else OverlapDecision.SKIP
    if running == 0 and buffered == 0:
        return OverlapDecision.RUN
    return OverlapDecision.BUFFER if buffered == 0 else OverlapDecision.SKIP
