"""Misfire plans: on-time runs, skip / run_once / run_all, caps, and bounded enumeration."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tickwheel.schedule import (
    MAX_CATCHUP_MIN,
    PLAN_LIMIT,
    REASON_MAX_CATCHUP,
    REASON_MISFIRE,
    MisfirePlan,
    ScheduleError,
    SkippedSpan,
    parse_at,
    parse_cron,
    plan_misfire,
    validate_misfire,
)
from tickwheel.wire.job import Misfire

pytestmark = pytest.mark.unit

MINUTE_MS = 60_000  # milliseconds
GRACE_MS = 60_000  # milliseconds, the default grace
T0 = parse_at("2026-03-01T12:00:00Z")  # a scheduled minute


def every(period_ms: int) -> Callable[[int], int | None]:
    """next_after of a schedule firing every period_ms from T0's grid."""

    def next_after(t: int) -> int | None:
        return t - (t - T0) % period_ms + period_ms

    return next_after


def never(_: int) -> int | None:
    """next_after of a one-off job: there is nothing after its instant."""
    return None


def test_due_within_grace_is_simply_run() -> None:
    """An occurrence no later than grace runs under every policy; next_run_at is the next one."""
    for policy in ("skip", "run_once", "run_all"):
        plan = plan_misfire(policy, GRACE_MS, 10, T0, T0 + GRACE_MS, every(10 * MINUTE_MS))
        assert plan == MisfirePlan(run=[T0], skipped=[], next_run_at=T0 + 10 * MINUTE_MS)


def test_one_millisecond_past_grace_is_a_misfire() -> None:
    """Lateness of grace_ms + 1 makes the occurrence a misfire."""
    plan = plan_misfire("skip", GRACE_MS, 10, T0, T0 + GRACE_MS + 1, every(10 * MINUTE_MS))
    assert plan.run == []
    assert plan.skipped == [(T0, REASON_MISFIRE)]


def test_not_yet_due_plans_nothing() -> None:
    """Before its instant a job gets an empty plan that keeps next_run_at (never early, I8)."""
    plan = plan_misfire("run_all", GRACE_MS, 10, T0, T0 - 1, every(MINUTE_MS))
    assert plan == MisfirePlan(run=[], skipped=[], next_run_at=T0)


def test_skip_records_misfires_and_runs_the_on_time_occurrence() -> None:
    """skip: occurrences older than grace are skipped ('misfire'), on-time ones still run."""
    now = T0 + 10 * MINUTE_MS + 5_000  # T0+9min is 65 s late: a misfire; T0+10min is on time
    plan = plan_misfire("skip", GRACE_MS, 10, T0, now, every(MINUTE_MS))
    assert plan.skipped == [(T0 + i * MINUTE_MS, REASON_MISFIRE) for i in range(10)]
    assert plan.run == [T0 + 10 * MINUTE_MS]
    assert plan.next_run_at == T0 + 11 * MINUTE_MS
    assert plan.skipped_span is None


def test_run_once_runs_the_oldest_misfire_and_skips_the_rest() -> None:
    """run_once: the occurrence the job waited for runs now; later misfires are skipped."""
    now = T0 + 5 * MINUTE_MS + 30_000
    plan = plan_misfire("run_once", 0, 10, T0, now, every(MINUTE_MS))
    assert plan.run == [T0]
    assert plan.skipped == [(T0 + i * MINUTE_MS, REASON_MISFIRE) for i in range(1, 6)]
    assert plan.next_run_at == T0 + 6 * MINUTE_MS


def test_run_all_runs_oldest_first_up_to_max_catchup() -> None:
    """run_all: the oldest max_catchup misfires run; the rest are skipped ('max_catchup')."""
    now = T0 + 9 * MINUTE_MS + 30_000
    plan = plan_misfire("run_all", 0, 3, T0, now, every(MINUTE_MS))
    assert plan.run == [T0, T0 + MINUTE_MS, T0 + 2 * MINUTE_MS]
    assert plan.skipped == [(T0 + i * MINUTE_MS, REASON_MAX_CATCHUP) for i in range(3, 10)]
    assert plan.next_run_at == T0 + 10 * MINUTE_MS


def test_max_catchup_has_the_job_documents_range() -> None:
    """the planner refuses max_catchup 0, as the job document does: one range, 1 to 1000"""
    with pytest.raises(ScheduleError, match="from 1 to 1000"):
        plan_misfire("run_all", 0, 0, T0, T0 + 2 * MINUTE_MS + 1, every(MINUTE_MS))
    with pytest.raises(ValidationError):
        Misfire(max_catchup=0)
    assert Misfire(max_catchup=MAX_CATCHUP_MIN).max_catchup == 1


@pytest.mark.parametrize(
    ("policy", "run", "skipped"),
    [
        ("skip", [], [(T0, REASON_MISFIRE)]),
        ("run_once", [T0], []),
        ("run_all", [T0], []),
    ],
)
def test_one_off_job_late(policy: str, run: list[int], skipped: list[tuple[int, str]]) -> None:
    """A late one-off job is run or skipped by policy, and then has no next run."""
    plan = plan_misfire(policy, GRACE_MS, 10, T0, T0 + 3_600_000, never)
    assert (plan.run, plan.skipped, plan.next_run_at) == (run, skipped, None)


def test_week_of_missed_seconds_is_bounded() -> None:
    """A per-second job late by a week lists PLAN_LIMIT skips, spans the rest, calls little."""
    calls = 0
    step = every(1_000)

    def counting(t: int) -> int | None:
        nonlocal calls
        calls += 1
        return step(t)

    now = T0 + 7 * 86_400_000
    plan = plan_misfire("skip", GRACE_MS, 10, T0, now, counting)
    assert len(plan.skipped) == PLAN_LIMIT
    assert plan.skipped_span == SkippedSpan(
        start_ms=T0 + PLAN_LIMIT * 1_000, end_ms=now - GRACE_MS, reason=REASON_MISFIRE
    )
    assert plan.run == [now - GRACE_MS + i * 1_000 for i in range(61)]
    assert plan.next_run_at == now + 1_000
    assert calls <= PLAN_LIMIT + 61 + 2


def test_span_reason_follows_the_policy() -> None:
    """Under run_all the unlisted misfires are over the cap, so the span says 'max_catchup'."""
    plan = plan_misfire("run_all", 0, 5, T0, T0 + 3_600_000, every(1_000))
    assert plan.run[:5] == [T0 + i * 1_000 for i in range(5)]
    assert plan.skipped_span is not None
    assert plan.skipped_span.reason == REASON_MAX_CATCHUP


def test_too_many_on_time_occurrences_leave_the_rest_for_the_next_plan() -> None:
    """With a huge grace, one plan runs PLAN_LIMIT occurrences and next_run_at is the next due."""
    now = T0 + 2 * PLAN_LIMIT * 1_000
    first = plan_misfire("skip", 86_400_000, 10, T0, now, every(1_000))
    assert len(first.run) == PLAN_LIMIT
    assert first.next_run_at == T0 + PLAN_LIMIT * 1_000
    second = plan_misfire("skip", 86_400_000, 10, first.next_run_at, now, every(1_000))
    assert second.run[0] == T0 + PLAN_LIMIT * 1_000
    assert second.next_run_at == now


def test_works_with_a_real_schedule_across_dst() -> None:
    """Planning with CronSchedule.next_after: a Berlin 02:30 job missed over the spring night."""
    schedule = parse_cron("30 2 * * *", tz="Europe/Berlin")
    expected = parse_at("2024-03-30T01:30:00Z")
    plan = plan_misfire(
        "run_all", GRACE_MS, 10, expected, parse_at("2024-04-01T12:00:00Z"), schedule.next_after
    )
    assert plan.run == [
        expected,
        parse_at("2024-03-31T01:00:00Z"),
        parse_at("2024-04-01T00:30:00Z"),
    ]
    assert plan.next_run_at == parse_at("2024-04-02T00:30:00Z")


@pytest.mark.parametrize(
    ("policy", "grace_ms", "max_catchup", "field"),
    [
        ("later", 0, 0, "misfire.policy"),
        ("skip", -1, 0, "misfire.grace_ms"),
        ("skip", 1.5, 0, "misfire.grace_ms"),
        ("skip", True, 0, "misfire.grace_ms"),
        ("run_all", 0, -1, "misfire.max_catchup"),
        ("run_all", 0, 1_001, "misfire.max_catchup"),
        ("run_all", 0, "3", "misfire.max_catchup"),
    ],
)
def test_bad_settings_name_their_field(
    policy: object, grace_ms: object, max_catchup: object, field: str
) -> None:
    """Each bad misfire setting is ScheduleError naming misfire.policy/grace_ms/max_catchup."""
    with pytest.raises(ScheduleError, match=rf"^{field} must be") as raised:
        validate_misfire(policy, grace_ms, max_catchup)
    assert raised.value.field == field


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(["skip", "run_once", "run_all"]),
    period_ms=st.sampled_from([1_000, 15_000, 60_000, 3_600_000]),
    grace_ms=st.integers(0, 600_000),
    max_catchup=st.integers(MAX_CATCHUP_MIN, 20),
    late_ms=st.integers(0, 7_200_000),
)
def test_every_due_occurrence_is_run_or_skipped_exactly_once(
    policy: str, period_ms: int, grace_ms: int, max_catchup: int, late_ms: int
) -> None:
    """Run, skipped and span partition the due occurrences; next_run_at is the first not due."""
    next_after = every(period_ms)
    now = T0 + late_ms
    plan = plan_misfire(policy, grace_ms, max_catchup, T0, now, next_after)
    due = list(range(T0, now + 1, period_ms))
    covered = sorted(plan.run + [instant for instant, _ in plan.skipped])
    if plan.skipped_span is not None:
        span = plan.skipped_span
        covered += [t for t in due if span.start_ms <= t < span.end_ms]
        covered.sort()
    if len([t for t in due if t >= now - grace_ms]) <= PLAN_LIMIT:
        assert covered == due
        assert plan.next_run_at == next_after(now)
    assert plan.run == sorted(plan.run)
    assert len(set(covered)) == len(covered)
    misfires_run = [t for t in plan.run if now - t > grace_ms]
    assert len(misfires_run) <= {"skip": 0, "run_once": 1, "run_all": max_catchup}[policy]
