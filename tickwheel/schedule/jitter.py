"""Jitter (D-287): a cron job's occurrence runs a little after its scheduled instant.

A job with `jitter_ms` J runs the occurrence scheduled at `s` at `s + offset`, where

    offset = stable_hash(run key, "jitter") mod J, at most next - s - 1

with `run key` the occurrence's `<tenant>/<job_id>@<s>` and `next` the job's following
occurrence (None: no cap). The offset is a function of the job, the instant and J alone — no
randomness, no process state — so every leader, a leader after a takeover, and every preview
compute the same one; and the jittered instant stays strictly before the next occurrence, so
jittered occurrences keep their order and never meet.

The run keeps the scheduled instant (its run key and `job_runs.scheduled_at`): jitter moves
when a run starts, not which run it is. What is late is measured from the jittered instant
(the *due* instant): the misfire grace, the dispatch lag, a worker's start lateness.

Registration bounds J below the schedule's *period*: the shortest gap between two consecutive
occurrences among the next `GAP_SAMPLE` from now within `GAP_SPAN_MS`, in the job's zone with
its DST policies (`shortest_gap`). The cap above covers a shorter gap beyond the sample (a
wall time repeated by a DST change it did not reach). Instants are UTC integer milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from tickwheel.schedule.hashing import stable_hash

JITTER_MAX_MS = 3_600_000  # milliseconds: the largest jitter_ms a job may ask for (one hour)
# The occurrences whose gaps bound a job's jitter_ms: the next GAP_SAMPLE, and none later than
# GAP_SPAN_MS from now — a year and more, so both DST changes of any zone are in it, whatever
# the day (a daily job's 400 span 13 months; a leap-day job's search for 400 would take a second).
GAP_SAMPLE = 400  # occurrences
GAP_SPAN_MS = 400 * 86_400_000  # milliseconds (400 days)
_SALT = "jitter"  # stable_hash's salt: no other hash of the run key collides with it


def jitter_offset(key: str, scheduled_ms: int, jitter_ms: int, next_ms: int | None) -> int:
    """The delay (ms, in [0, jitter_ms)) of the job `key`'s occurrence at `scheduled_ms`, at
    most `next_ms - scheduled_ms - 1` when the job's next occurrence is `next_ms`."""
    if jitter_ms <= 0:
        return 0
    offset = stable_hash(f"{key}@{scheduled_ms}", _SALT) % jitter_ms
    if next_ms is not None and offset >= next_ms - scheduled_ms:
        offset = max(0, next_ms - scheduled_ms - 1)
    return offset


def shortest_gap(instants: Iterable[int]) -> int | None:
    """The shortest gap (ms) between consecutive `instants` (ascending); None for fewer than
    two."""
    return min((b - a for a, b in pairwise(instants)), default=None)
