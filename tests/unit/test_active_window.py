"""A cron job's active window (`start_at`, `end_at`, `after_end`; issue 50): no occurrence
outside it, wherever occurrences are computed — the registry, a leader's claim plan, a backfill,
the preview — and the job completes (or is deleted) after its last one. And the document's part
of pause on failure (`pause_after_dead_runs`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.clock import format_ms
from tickwheel.registry_api.auto_pause import note_reason
from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    check_pause_note,
    parse_document,
    validate_job,
)
from tickwheel.registry_api.on_demand import RunLimits, occurrences
from tickwheel.registry_api.render import preview_body
from tickwheel.registry_api.rows import JobView
from tickwheel.registry_api.state import Op, Outcome, apply
from tickwheel.schedule import ScheduleCache, Timing, next_fire_after, parse_cron
from tickwheel.schedule.explain import explain_cron, render_text
from tickwheel.schedule.window import Window
from tickwheel.shards.plan import JobEntry, plan_claims

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z
HOUR = 3_600_000
T = "acme"


def _doc(**fields: Any) -> dict[str, Any]:
    return {"id": "w", "schedule": "0 * * * *", "handler": "h.run", **fields}


def _spec(**fields: Any) -> Any:
    return validate_job(T, parse_document(_doc(**fields)), Limits(), NOW)


def _problems(**fields: Any) -> dict[str, str]:
    with pytest.raises(JobValidationError) as caught:
        _spec(**fields)
    return {p.field: p.message for p in caught.value.problems}


def _entry(  # type: ignore[no-untyped-def]
    start_ms: int | None,
    end_ms: int | None,
    next_ms: int,
    after_end: str | None = None,
    max_runs: int | None = None,
    misfire: str = "run_once",
    overlap: str = "allow",
):
    return JobEntry.of(
        tenant=T, job_id="w", version=1, next_ms=next_ms, kind="cron", schedule="0 * * * *",
        timezone="UTC", dst_gap="shift", dst_overlap="first", misfire_policy=misfire,
        grace_ms=60_000, max_catchup=10, overlap_policy=overlap, start_ms=start_ms,
        end_ms=end_ms, after_end=after_end, max_runs=max_runs,
    )  # fmt: skip


# --- the pure rule ---------------------------------------------------------------------------


def test_the_window_bounds_are_inclusive() -> None:
    """an occurrence exactly at start_at or at end_at fires; none before or after"""
    timing = Timing("acme/w", "0 * * * *", start_ms=NOW + HOUR, end_ms=NOW + 3 * HOUR)
    cache = ScheduleCache()
    assert next_fire_after(cache, timing, NOW - 5 * HOUR) == NOW + HOUR
    assert next_fire_after(cache, timing, NOW + HOUR) == NOW + 2 * HOUR
    assert next_fire_after(cache, timing, NOW + 2 * HOUR) == NOW + 3 * HOUR
    assert next_fire_after(cache, timing, NOW + 3 * HOUR) is None


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]
# 2026-01-01 .. 2028-01-01: every zone above changes its clocks in there
SPAN = (1_767_225_600_000, 1_830_297_600_000)


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    expr=st.sampled_from(["30 2 * * *", "0 */3 * * *", "15 1-3 * * SUN", "*/20 * * * *"]),
    start=st.integers(*SPAN),
    length=st.integers(0, 30 * 24 * HOUR),
    after=st.integers(*SPAN),
)
def test_a_windowed_occurrence_is_the_unbounded_one_when_inside_and_none_is_outside(
    zone: str, expr: str, start: int, length: int, after: int
) -> None:
    """property, across DST changes: the windowed next occurrence is never outside the window,
    and every occurrence of the plain schedule inside the window is one of the windowed ones"""
    end = start + length
    cache = ScheduleCache()
    plain = Timing("acme/w", expr, timezone=zone)
    windowed = Timing("acme/w", expr, timezone=zone, start_ms=start, end_ms=end)
    found = next_fire_after(cache, windowed, after)
    if found is not None:
        assert start <= found <= end and found > after
    # The plain schedule's first occurrence after max(after, start - 1) decides.
    expected = next_fire_after(cache, plain, max(after, start - 1))
    assert found == (expected if expected is not None and expected <= end else None)


# --- the document ----------------------------------------------------------------------------


def test_a_window_is_stored_and_absent_fields_stay_out_of_the_document() -> None:
    """start_at, end_at and after_end are kept as given; a document without them is stored as
    before (so jobs written before the window keep their documents, and compare equal)"""
    spec = _spec(start_at="2027-02-01T00:00:00Z", end_at="2027-03-01T00:00:00Z", after_end="delete")
    stored = spec.stored_document
    assert stored["start_at"] == "2027-02-01T00:00:00Z" and stored["after_end"] == "delete"
    assert spec.window_ms == (1_801_440_000_000, 1_803_859_200_000)
    assert spec.first_run_at(NOW) == 1_801_440_000_000  # the window's first hour
    plain = _spec().stored_document
    assert not {"start_at", "end_at", "after_end"} & plain.keys()


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (
            {"start_at": "2027-03-01T00:00:00Z", "end_at": "2027-02-01T00:00:00Z"},
            "end_at",
            "must be after start_at (2027-03-01T00:00:00.000Z)",
        ),
        (
            {"start_at": "2027-03-01T00:00:00Z", "end_at": "2027-03-01T00:00:00Z"},
            "end_at",
            "must be after start_at",
        ),
        ({"end_at": "2027-01-15T07:00:00Z"}, "end_at", "no occurrence of the schedule"),
        ({"end_at": "2027-01-15T08:30:00Z"}, "end_at", "the job would never run"),
        ({"after_end": "delete"}, "after_end", "needs end_at"),
        ({"after_end": "archive"}, "after_end", "'complete' or 'delete'"),
        ({"start_at": "tomorrow"}, "start_at", "ISO-8601"),
        ({"end_at": 1800000000000}, "end_at", "string"),
    ],
)
def test_a_bad_window_is_refused_naming_its_field(
    fields: dict[str, Any], field: str, words: str
) -> None:
    """422 material: the field named and what is wrong with it"""
    problems = _problems(**fields)
    assert field in problems, problems
    assert words in problems[field], problems[field]


def test_a_window_on_a_one_off_is_refused() -> None:
    """a one-off runs once, at `at`: a window there is a mistake, not a no-op"""
    doc = {"id": "o", "at": "2027-02-01T00:00:00Z", "handler": "h.run",
           "end_at": "2027-03-01T00:00:00Z", "after_end": "delete"}  # fmt: skip
    with pytest.raises(JobValidationError) as caught:
        validate_job(T, parse_document(doc), Limits(), NOW)
    fields = {p.field: p.message for p in caught.value.problems}
    assert set(fields) == {"end_at", "after_end"}
    assert "cron schedule only" in fields["end_at"]


# --- the registry's state machine ------------------------------------------------------------


def test_a_window_edit_moves_the_next_occurrence_and_a_resume_after_the_end_completes() -> None:
    """start_at is timing: moving it moves next_run_at; resuming a job whose window ended while
    it was paused completes it (or deletes it with after_end 'delete')"""
    job, outcome = apply(None, Op("upsert", T, "w", spec=_spec()), NOW)
    assert outcome is Outcome.CREATED and job is not None and job.next_run_at == NOW + HOUR
    later = _spec(start_at=format_ms(NOW + 5 * HOUR))
    moved, outcome = apply(job, Op("upsert", T, "w", spec=later), NOW)
    assert outcome is Outcome.UPDATED and moved is not None and moved.next_run_at == NOW + 5 * HOUR
    for after_end, status in ((None, "completed"), ("delete", "deleted")):
        fields = {"end_at": format_ms(NOW + 2 * HOUR)} | (
            {"after_end": after_end} if after_end else {}
        )
        spec = _spec(**fields)
        job, _ = apply(None, Op("upsert", T, "w", spec=spec), NOW)
        assert job is not None
        paused, _ = apply(job, Op("pause", T, "w"), NOW)
        assert paused is not None
        resumed, outcome = apply(paused, Op("resume", T, "w"), NOW + 3 * HOUR, lambda _, s=spec: s)
        assert outcome is Outcome.RESUMED and resumed is not None
        assert (resumed.status, resumed.next_run_at) == (status, None)


# --- the leader's plan, backfills, the preview ------------------------------------------------


def test_the_claim_of_the_last_occurrence_plans_no_next_one() -> None:
    """claiming the window's last occurrence leaves the job with no next one (the position
    then completes it); a misfire catch-up never reaches past the end"""
    end = NOW + 2 * HOUR
    batch = plan_claims([_entry(None, end, NOW + HOUR)], NOW + HOUR, ScheduleCache())
    assert batch.next_ms == [NOW + 2 * HOUR] and batch.run_ms == [NOW + HOUR]
    batch = plan_claims([_entry(None, end, NOW + 2 * HOUR)], NOW + 2 * HOUR, ScheduleCache())
    assert batch.next_ms == [None] and batch.complete == [True]
    late = plan_claims([_entry(None, end, NOW + HOUR)], NOW + 9 * HOUR, ScheduleCache())
    assert late.next_ms == [None]
    assert all(ms <= end for ms in late.run_ms)


def test_a_backfill_runs_the_windows_occurrences_only() -> None:
    """a backfill follows the schedule, window included (a job registered before its window,
    backfilled after it ended)"""
    doc = _doc(start_at=format_ms(NOW - 5 * HOUR), end_at=format_ms(NOW - 2 * HOUR))
    spec = validate_job(T, parse_document(doc), Limits(), NOW - 10 * HOUR)
    found = occurrences(spec.timing, NOW - 10 * HOUR, NOW, NOW, RunLimits())
    assert found == [NOW - 5 * HOUR, NOW - 4 * HOUR, NOW - 3 * HOUR, NOW - 2 * HOUR]


def test_the_preview_names_the_windows_start_and_its_last_occurrence() -> None:
    """`GET …/preview` and `cron next --explain`: the first occurrence of a window not open
    yet says start_at put it there, the last says end_at and what becomes of the job"""
    spec = _spec(
        start_at=format_ms(NOW + 3 * HOUR), end_at=format_ms(NOW + 5 * HOUR), after_end="delete"
    )
    view = JobView(spec.stored_document, "active", 1, NOW + 3 * HOUR, None, None)
    body = preview_body(view, spec, 10, NOW)
    assert [o["at"] for o in body["occurrences"]] == [format_ms(NOW + k * HOUR) for k in (3, 4, 5)]
    first, _, last = body["occurrences"]
    assert [r["rule"] for r in first["reasons"]] == ["start_at"]
    assert [r["rule"] for r in last["reasons"]] == ["end_at"]
    assert "is deleted" in last["reasons"][0]["text"]
    assert body["window"] == {
        "start_at": format_ms(NOW + 3 * HOUR),
        "end_at": format_ms(NOW + 5 * HOUR),
        "after_end": "delete",
    }
    schedule = parse_cron("0 * * * *")
    window = Window(None, NOW + HOUR, None)
    text = render_text(
        explain_cron(schedule, [NOW + HOUR], after_ms=NOW, now_ms=NOW, window=window)
    )
    assert "end_at: the last occurrence" in text and "after it the job completes" in text


# --- pause on failure: the document's part (the pausing: tests/integration) ---------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [(0, "greater than or equal to 1"), (101, "less than or equal to 100"), ("3", "integer")],
)
def test_pause_after_dead_runs_is_1_to_100(value: Any, words: str) -> None:
    problems = _problems(pause_after_dead_runs=value)
    assert words in problems["pause_after_dead_runs"], problems


def test_pause_after_dead_runs_is_for_cron_jobs_and_kept_only_when_given() -> None:
    """a one-off has one run: the setting there is refused; absent, it stays out of the
    stored document"""
    assert _spec(pause_after_dead_runs=3).stored_document["pause_after_dead_runs"] == 3
    assert "pause_after_dead_runs" not in _spec().stored_document
    doc = {"id": "o", "at": "2027-02-01T00:00:00Z", "handler": "h.run", "pause_after_dead_runs": 1}
    with pytest.raises(JobValidationError) as caught:
        validate_job(T, parse_document(doc), Limits(), NOW)
    assert [p.field for p in caught.value.problems] == ["pause_after_dead_runs"]


def test_the_pause_note_names_the_count_and_the_last_dead_run() -> None:
    assert note_reason(3, "acme/w@1") == (
        "paused after 3 consecutive runs died (pause_after_dead_runs: 3); the last: acme/w@1"
    )
    assert note_reason(1, "acme/w@1").startswith("paused after a run died (")


# --- limited runs: the plan's part (the counting across leaders: tests/integration) ------------


def test_max_runs_caps_a_claim_and_completes_the_job_on_its_last_run() -> None:
    """3 allowed, 1 done: a claim runs the next one and goes on; with 2 done it runs the last
    one and plans no next occurrence; with 3 done it runs nothing and completes. Each claim
    says what the count becomes and the instant it runs through."""
    ids = (T, "w")
    entry = _entry(None, None, NOW + HOUR, max_runs=3)
    on = plan_claims([entry], NOW + HOUR, ScheduleCache(), done={ids: (1, 0)})
    assert (on.run_ms, on.next_ms, on.counted[ids]) == (
        [NOW + HOUR],
        [NOW + 2 * HOUR],
        (2, NOW + HOUR + 1),
    )
    last = plan_claims([entry], NOW + HOUR, ScheduleCache(), done={ids: (2, 0)})
    assert (last.run_ms, last.next_ms, last.counted[ids]) == (
        [NOW + HOUR],
        [None],
        (3, NOW + HOUR + 1),
    )
    over = plan_claims([entry], NOW + HOUR, ScheduleCache(), done={ids: (3, 0)})
    # (a job reactivated by an edit after its last run: the occurrence is recorded, not run)
    assert (over.run_status, over.run_reason) == (
        ["skipped"],
        ["max_runs: the job's 3 runs are done"],
    )
    assert (over.next_ms, over.complete, over.counted[ids][0]) == ([None], [True], 3)
    plain = plan_claims([_entry(None, None, NOW + HOUR)], NOW + HOUR, ScheduleCache())
    assert plain.counted == {} and plain.next_ms == [NOW + 2 * HOUR]


def test_a_catch_up_past_max_runs_records_the_rest_skipped() -> None:
    """run_all catching up 5 missed hours with 2 runs left: the 2 oldest run, the other 3 are
    recorded skipped naming max_runs (nothing silently lost), and the job completes"""
    ids = (T, "w")
    entry = _entry(None, None, NOW + HOUR, max_runs=4, misfire="run_all")
    batch = plan_claims([entry], NOW + 5 * HOUR + 1000, ScheduleCache(), done={ids: (2, 0)})
    rows = list(zip(batch.run_ms, batch.run_status, batch.run_reason, strict=True))
    assert [(ms, st) for ms, st, _ in rows if st == "pending"] == [
        (NOW + HOUR, "pending"),
        (NOW + 2 * HOUR, "pending"),
    ]
    skipped = [(ms, reason) for ms, st, reason in rows if st == "skipped"]
    assert [ms for ms, _ in skipped] == [NOW + 3 * HOUR, NOW + 4 * HOUR, NOW + 5 * HOUR]
    assert all(reason == "max_runs: the job's 4 runs are done" for _, reason in skipped)
    assert batch.next_ms == [None] and batch.counted[ids] == (4, NOW + 5 * HOUR + 1)


def test_an_overlap_skip_is_not_counted_and_does_not_end_the_job() -> None:
    """the policy skips what would be the last run (one still in flight): not counted, and the
    job goes on to its next occurrence instead of completing one run short"""
    ids = (T, "w")
    entry = _entry(None, None, NOW + HOUR, max_runs=2, overlap="skip")
    batch = plan_claims([entry], NOW + HOUR, ScheduleCache(), {ids: (1, 0)}, {ids: (1, 0)})
    assert batch.run_status == ["skipped"] and batch.counted[ids] == (1, NOW + HOUR + 1)
    assert batch.next_ms == [NOW + 2 * HOUR] and batch.complete == [False]
    ran = plan_claims([entry], NOW + HOUR, ScheduleCache(), {ids: (0, 0)}, {ids: (1, 0)})
    assert ran.run_status == ["pending"] and ran.next_ms == [None]


def test_only_a_windows_end_deletes_a_job_whose_runs_ran_out_it_completes() -> None:
    """after_end 'delete' with max_runs: the claim of the last run completes the job (sending
    its document again must not start a new count); the leader deletes on a window's end"""
    from tickwheel.shards.plan import runs_used_up as _runs_used_up

    entry = _entry(None, NOW + 9 * HOUR, NOW + HOUR, after_end="delete", max_runs=2)
    assert _runs_used_up(entry, (2, NOW + HOUR + 1))
    assert not _runs_used_up(entry, (1, NOW + HOUR + 1))
    assert not _runs_used_up(_entry(None, NOW, NOW, after_end="delete"), None)


def test_an_edit_of_the_window_keeps_a_due_occurrence_the_new_window_holds() -> None:
    """extending end_at while the 09:00 run is due and unclaimed keeps it; moving start_at
    earlier brings the earlier occurrences in"""
    job, _ = apply(None, Op("upsert", T, "w", spec=_spec(end_at=format_ms(NOW + 5 * HOUR))), NOW)
    assert job is not None and job.next_run_at == NOW + HOUR
    due = NOW + HOUR + 30_000  # the NOW + 1 h occurrence is due and not claimed yet
    longer = _spec(end_at=format_ms(NOW + 9 * HOUR))
    kept, _ = apply(job, Op("upsert", T, "w", spec=longer), due)
    assert kept is not None and kept.next_run_at == NOW + HOUR
    later, _ = apply(
        None, Op("upsert", T, "w", spec=_spec(start_at=format_ms(NOW + 5 * HOUR))), NOW
    )
    assert later is not None and later.next_run_at == NOW + 5 * HOUR
    earlier, _ = apply(later, Op("upsert", T, "w", spec=_spec(start_at=format_ms(NOW))), NOW)
    assert earlier is not None and earlier.next_run_at == NOW + HOUR


@pytest.mark.parametrize(
    ("note", "ok"),
    [("line one\nline two\tand a tab", True), ("\x1b[31mred", False), ("bell\x07", False),
     ("del\x7f", False), ("", False), ("x" * 501, False), ("x" * 500, True)],
)  # fmt: skip
def test_a_tenants_pause_note_is_text_a_terminal_can_show(note: str, ok: bool) -> None:
    if ok:
        assert check_pause_note(note) == note
    else:
        with pytest.raises(JobValidationError):
            check_pause_note(note)


def test_instants_before_the_count_starts_are_not_counted() -> None:
    """a job given max_runs while its leader's position lagged: its row's next_run_at is an
    instant already claimed, so the claim plans those again (no-ops: their runs exist); only
    the instants from where the count starts count"""
    ids = (T, "w")
    entry = _entry(None, None, NOW + HOUR, max_runs=2, misfire="run_all")
    since = NOW + 2 * HOUR + 1  # the runs at +1 h and +2 h were claimed before the limit
    batch = plan_claims([entry], NOW + 4 * HOUR + 1000, ScheduleCache(), done={ids: (0, since)})
    assert batch.run_status == ["pending"] * 4
    assert batch.counted[ids] == (2, NOW + 4 * HOUR + 1) and batch.next_ms == [None]


def test_max_runs_is_for_cron_jobs() -> None:
    assert _spec(max_runs=10).stored_document["max_runs"] == 10
    assert "max_runs" not in _spec().stored_document
    assert "greater than or equal to 1" in _problems(max_runs=0)["max_runs"]
    doc = {"id": "o", "at": "2027-02-01T00:00:00Z", "handler": "h.run", "max_runs": 1}
    with pytest.raises(JobValidationError) as caught:
        validate_job(T, parse_document(doc), Limits(), NOW)
    assert [p.field for p in caught.value.problems] == ["max_runs"]


def test_the_preview_stops_at_the_last_run_left_and_says_so() -> None:
    """max_runs 3 with 1 done: two occurrences, the second the last run; the body's `runs`
    says how many are done and left"""
    spec = _spec(max_runs=3)
    view = JobView(spec.stored_document, "active", 1, NOW + HOUR, None, None)
    body = preview_body(view, spec, 10, NOW, runs_done=1)
    assert [o["at"] for o in body["occurrences"]] == [
        format_ms(NOW + HOUR),
        format_ms(NOW + 2 * HOUR),
    ]
    assert [r["rule"] for r in body["occurrences"][-1]["reasons"]] == ["max_runs"]
    assert body["runs"] == {"max_runs": 3, "done": 1, "left": 2}
    done = preview_body(view, spec, 10, NOW, runs_done=3)
    assert done["occurrences"] == [] and done["runs"]["left"] == 0
    assert preview_body(view, _spec(), 2, NOW)["runs"] is None
