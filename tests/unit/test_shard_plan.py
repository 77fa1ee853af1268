"""Claim planning without I/O: misfire and overlap per due job, spans as one row, one-offs."""

from __future__ import annotations

import pytest

from tickwheel.schedule import ScheduleCache
from tickwheel.shards.plan import JobEntry, plan_claims

pytestmark = pytest.mark.unit

T0 = 1_796_000_000_000  # a whole minute (UTC ms)


def _job(**overrides: object) -> JobEntry:
    values: dict[str, object] = {
        "tenant": "acme",
        "job_id": "j",
        "version": 1,
        "next_ms": T0,
        "kind": "cron",
        "schedule": "* * * * * *",
        "timezone": "UTC",
        "dst_gap": "shift",
        "dst_overlap": "first",
        "misfire_policy": "run_once",
        "grace_ms": 1000,
        "max_catchup": 3,
        "overlap_policy": "allow",
    }
    values.update(overrides)
    return JobEntry.of(**values)  # type: ignore[arg-type]


def _runs(batch: object) -> list[tuple[int, str, str | None, bool]]:
    b = batch
    return list(zip(b.run_ms, b.run_status, b.run_reason, b.run_leased, strict=True))  # type: ignore[attr-defined]


def test_on_time_job_runs_once_and_advances() -> None:
    """a job due now runs its occurrence (leased) and advances to the next one"""
    batch = plan_claims([_job()], T0 + 5, ScheduleCache())
    assert _runs(batch) == [(T0, "pending", None, True)]
    assert (batch.expected_ms, batch.next_ms, batch.complete) == ([T0], [T0 + 1000], [False])


def test_one_off_completes() -> None:
    """a one-off runs and completes (no next occurrence)"""
    batch = plan_claims([_job(kind="once", schedule=None)], T0, ScheduleCache())
    assert _runs(batch) == [(T0, "pending", None, True)]
    assert (batch.next_ms, batch.complete) == ([None], [True])


def test_late_one_off_with_skip_is_recorded_skipped() -> None:
    """a one-off found later than its grace under misfire skip is one skipped row"""
    job = _job(kind="once", schedule=None, misfire_policy="skip")
    batch = plan_claims([job], T0 + 5000, ScheduleCache())
    assert _runs(batch) == [(T0, "skipped", "misfire", False)]
    assert batch.complete == [True]


def test_run_all_runs_max_catchup_and_skips_the_rest() -> None:
    """run_all runs the oldest max_catchup misfires and records the others max_catchup"""
    batch = plan_claims([_job(misfire_policy="run_all")], T0 + 5500, ScheduleCache())
    runs = _runs(batch)
    assert [r[1] for r in runs[:3]] == ["pending"] * 3
    # 5.5 s late with a 1 s grace: T0..T0+4000 misfired, T0+5000 is on time and runs.
    assert [(r[0], r[2]) for r in runs if r[1] == "skipped"] == [
        (T0 + 3000, "max_catchup"),
        (T0 + 4000, "max_catchup"),
    ]
    assert (T0 + 5000, "pending", None, True) in runs
    assert batch.next_ms == [T0 + 6000]


def test_a_long_outage_is_one_span_row_not_thousands() -> None:
    """two hours of missed seconds give the listed skips plus one summary row for the rest"""
    batch = plan_claims([_job(misfire_policy="skip")], T0 + 7_200_000, ScheduleCache())
    reasons = [r[2] for r in _runs(batch)]
    assert reasons.count("misfire") == 1000
    spans = [r for r in _runs(batch) if r[2] and r[2].startswith("misfire: every occurrence")]
    assert len(spans) == 1 and spans[0][0] == T0 + 1000 * 1000
    assert len(reasons) == 1003  # and two on time (within the 1 s grace) run


def test_overlap_skip_and_buffer_one_use_the_in_flight_counts() -> None:
    """with a run in flight, skip records the occurrence skipped and buffer_one buffers one
    (pending without a lease) and skips the next"""
    skip = _job(job_id="s", overlap_policy="skip")
    buffer = _job(job_id="b", overlap_policy="buffer_one", misfire_policy="run_all", grace_ms=0)
    counts = {("acme", "s"): (1, 0), ("acme", "b"): (1, 0)}
    batch = plan_claims([skip, buffer], T0 + 1000, ScheduleCache(), counts)
    runs = _runs(batch)
    assert runs[0] == (T0, "skipped", "overlap", False)
    assert (T0, "pending", None, False) in runs[1:]  # buffered
    assert (T0 + 1000, "skipped", "overlap", False) in runs[1:]
    free = plan_claims([skip], T0, ScheduleCache(), {})
    assert _runs(free) == [(T0, "pending", None, True)]
