"""Misfire handling (DESIGN §6): which due occurrences of a job run, and which are skipped.

An occurrence is *due* once its instant has passed. It is *on time* while it is no more than
`grace_ms` late (`now - occurrence <= grace_ms`) and is then simply run, whatever the policy.
Later than that it is a *misfire*, handled by the job's policy:

    skip      every misfire is recorded skipped (reason "misfire")
    run_once  the oldest misfire (the occurrence the job was waiting for) runs now, the other
              misfires are recorded skipped (reason "misfire"); on-time occurrences run as usual
    run_all   the misfires run oldest first, at most `max_catchup` of them; the rest are
              recorded skipped (reason "max_catchup")

A plan covers every occurrence from `expected_ms` to `now_ms`, so after it `next_run_at` is in
the future — except when more than PLAN_LIMIT on-time occurrences are due at once; then
`next_run_at` is the first one not covered and the caller plans again.

Enumeration is bounded. A per-second job that missed a week has 604,800 misfires; listing them
would cost memory, time and as many `job_runs` rows. A plan lists at most PLAN_LIMIT misfires
one by one and describes the rest as one `SkippedSpan` — "every occurrence in [start, end) was
skipped, for this reason" — found by jumping to `next_after(end - 1)` rather than walking there.
The caller records the span as one entry (a summary row or event), so nothing is silently lost
(I7) while the cost stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from tickwheel.schedule.errors import ScheduleError, parse_choice

DEFAULT_GRACE_MS = 60_000  # milliseconds
DEFAULT_MAX_CATCHUP = 10  # runs
# runs: max_catchup's one range, for the job document and this planner alike (docs/API.md);
# a run_all job that may catch up none is a skip job.
MAX_CATCHUP_MIN = 1
MAX_CATCHUP_LIMIT = 1_000  # runs; the largest max_catchup a job may ask for
PLAN_LIMIT = 1_000  # occurrences one plan lists one by one, separately for misfires and on-time

REASON_MISFIRE = "misfire"
REASON_MAX_CATCHUP = "max_catchup"


class MisfirePolicy(StrEnum):
    """A job's `misfire.policy`."""

    SKIP = "skip"
    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"


@dataclass(frozen=True, slots=True)
class SkippedSpan:
    """Skipped occurrences not listed one by one: every occurrence in `[start_ms, end_ms)`."""

    start_ms: int  # UTC ms, the first occurrence of the span
    end_ms: int  # UTC ms, exclusive bound
    reason: str


@dataclass(frozen=True, slots=True)
class MisfirePlan:
    """What to do with the due occurrences of one job (instants in UTC ms)."""

    run: list[int]  # scheduled instants to run, oldest first
    skipped: list[tuple[int, str]]  # (instant, reason), oldest first
    next_run_at: int | None  # the job's next occurrence after the plan; None: no more
    skipped_span: SkippedSpan | None = field(default=None)  # further skips, not enumerated


def parse_misfire_policy(value: object) -> MisfirePolicy:
    """The misfire policy named `value`, or ScheduleError("misfire.policy")."""
    return parse_choice(MisfirePolicy, value, "misfire.policy")


def validate_misfire(policy: object, grace_ms: object, max_catchup: object) -> MisfirePolicy:
    """Check a job's misfire settings; raises ScheduleError naming the bad one."""
    mode = parse_misfire_policy(policy)
    if isinstance(grace_ms, bool) or not isinstance(grace_ms, int) or grace_ms < 0:
        raise ScheduleError(
            "misfire.grace_ms",
            f"misfire.grace_ms must be an integer number of milliseconds >= 0; got {grace_ms!r}.",
        )
    if (
        isinstance(max_catchup, bool)
        or not isinstance(max_catchup, int)
        or not MAX_CATCHUP_MIN <= max_catchup <= MAX_CATCHUP_LIMIT
    ):
        raise ScheduleError(
            "misfire.max_catchup",
            f"misfire.max_catchup must be an integer from {MAX_CATCHUP_MIN} to "
            f"{MAX_CATCHUP_LIMIT}; "
            f"got {max_catchup!r}.",
        )
    return mode


def plan_misfire(
    policy: str,
    grace_ms: int,
    max_catchup: int,
    expected_ms: int,
    now_ms: int,
    next_after: Callable[[int], int | None],
    due: Callable[[int], int] | None = None,
    jitter_ms: int = 0,
    excluded: Callable[[int], str | None] | None = None,
) -> MisfirePlan:
    """Plan the occurrences of a job from `expected_ms` (its `next_run_at`) up to `now_ms`.

    `next_after(t)` gives the job's first occurrence strictly after `t` (for a one-off job,
    always None). Before `expected_ms` is due the plan is empty and keeps `next_run_at`.

    A job with jitter (`jitter.py`, D-287) passes `due(s)`, the instant its occurrence
    scheduled at `s` is due (`s <= due(s) < s + jitter_ms`, and before the next occurrence):
    an occurrence is then on time, late or not due yet by its due instant, while the plan
    still names it by its scheduled one.

    A job with exclusion calendars (`calendars.py`, D-286) passes `excluded(s)`, the calendar
    and rule excluding the occurrence at `s` (None: it may run). An excluded occurrence is
    recorded skipped with that reason, and the policy chooses among the others: `run_once`
    runs the oldest misfire no calendar excludes, `run_all` the first `max_catchup` of them.
    Occurrences past PLAN_LIMIT stay in the span, under the policy's reason.
    """
    mode = validate_misfire(policy, grace_ms, max_catchup)
    if now_ms < expected_ms:
        return MisfirePlan(run=[], skipped=[], next_run_at=expected_ms)
    late_before = now_ms - grace_ms  # an occurrence due before this instant is a misfire
    misfires: list[int] = []
    occurrence: int | None = expected_ms
    while (
        occurrence is not None
        and (occurrence if due is None else due(occurrence)) < late_before
        and len(misfires) < PLAN_LIMIT
    ):
        misfires.append(occurrence)
        occurrence = next_after(occurrence)
    span_start: int | None = None
    span_end = late_before
    if occurrence is not None and (occurrence if due is None else due(occurrence)) < late_before:
        span_start = occurrence
        if due is None:
            occurrence = next_after(late_before - 1)
        else:
            # One scheduled before `late_before` may be due after it: jump short of the end by
            # the jitter, then walk to the first occurrence due at or after it.
            occurrence = next_after(max(span_start, late_before - jitter_ms))
            while occurrence is not None and due(occurrence) < late_before:
                occurrence = next_after(occurrence)
            if occurrence is not None:
                span_end = min(span_end, occurrence)
    on_time: list[int] = []
    while (
        occurrence is not None
        and (occurrence if due is None else due(occurrence)) <= now_ms
        and len(on_time) < PLAN_LIMIT
    ):
        on_time.append(occurrence)
        occurrence = next_after(occurrence)

    calendar_skips: list[tuple[int, str]] = []
    if excluded is not None:
        misfires = _allowed(misfires, excluded, calendar_skips)
        on_time = _allowed(on_time, excluded, calendar_skips)
    if mode is MisfirePolicy.SKIP:
        run, skipped, reason = [], misfires, REASON_MISFIRE
    elif mode is MisfirePolicy.RUN_ONCE:
        run, skipped, reason = misfires[:1], misfires[1:], REASON_MISFIRE
    else:
        run, skipped, reason = misfires[:max_catchup], misfires[max_catchup:], REASON_MAX_CATCHUP
    skips = [(instant, reason) for instant in skipped]
    if calendar_skips:
        skips = sorted(skips + calendar_skips)
    return MisfirePlan(
        run=run + on_time,
        skipped=skips,
        next_run_at=occurrence,
        skipped_span=(
            SkippedSpan(start_ms=span_start, end_ms=span_end, reason=reason)
            if span_start is not None
            else None
        ),
    )


def _allowed(
    instants: list[int], excluded: Callable[[int], str | None], skips: list[tuple[int, str]]
) -> list[int]:
    """The instants no calendar excludes; the others go to `skips` with their reason."""
    kept = []
    for instant in instants:
        why = excluded(instant)
        if why is None:
            kept.append(instant)
        else:
            skips.append((instant, why))
    return kept
