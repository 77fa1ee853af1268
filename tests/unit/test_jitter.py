"""Jitter (D-287): each occurrence delayed by an offset its run key decides, below the next one;
claimed when due, keyed by its scheduled instant, late from its due instant."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.clock import format_ms
from tickwheel.envelopes.run import RunEnvelope, encode_run
from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    parse_document,
    validate_job,
)
from tickwheel.schedule import (
    JITTER_MAX_MS,
    ScheduleCache,
    jitter_offset,
    parse_cron,
    plan_misfire,
    shortest_gap,
)
from tickwheel.schedule.explain import explain_cron
from tickwheel.shards.dbclock import DbClock
from tickwheel.shards.leader import LeaderConfig, ShardLeader, Shared
from tickwheel.shards.plan import JobEntry, due_at, plan_claims

pytestmark = pytest.mark.unit

T0 = 1_796_000_000_000  # a whole minute (UTC ms)
KEY = "acme/nightly"

# Schedules and zones whose gaps vary: DST changes in both directions, both DST policies.
SCHEDULES = [
    ("* * * * * *", "UTC", "shift", "first"),
    ("*/7 * * * *", "America/New_York", "shift", "first"),
    ("30 2 * * *", "Europe/Berlin", "shift", "both"),
    ("30 2 * * *", "Europe/Berlin", "skip", "last"),
    ("0,59 1,2 * * *", "Australia/Lord_Howe", "shift", "both"),
    ("H H * * *", "Asia/Kolkata", "shift", "first"),
]


@settings(max_examples=200, deadline=None)
@given(
    which=st.sampled_from(SCHEDULES),
    job=st.text("abcxyz-", min_size=1, max_size=8),
    after=st.integers(T0 - 400 * 86_400_000, T0 + 400 * 86_400_000),
    jitter=st.integers(1, 2 * JITTER_MAX_MS),
)
def test_an_offset_is_below_the_jitter_and_never_reaches_the_next_occurrence(
    which: tuple[str, str, str, str], job: str, after: int, jitter: int
) -> None:
    """the offset is in [0, jitter), the same on every call, and the jittered instant stays
    strictly before the next occurrence, across DST changes and whatever the jitter"""
    expr, zone, gap, overlap = which
    key = f"acme/{job}"
    schedule = parse_cron(expr, tz=zone, key=key, dst_gap=gap, dst_overlap=overlap)
    first, second, third = schedule.next_n(after, 3)
    for scheduled, following in ((first, second), (second, third)):
        offset = jitter_offset(key, scheduled, jitter, following)
        assert 0 <= offset < jitter
        assert scheduled + offset < following
        assert offset == jitter_offset(key, scheduled, jitter, following)


def test_offsets_spread_over_the_jitter_and_depend_on_job_and_instant() -> None:
    """over many instants the offsets cover [0, jitter); another job or instant moves them"""
    offsets = [jitter_offset(KEY, T0 + i * 1000, 800, None) for i in range(2000)]
    assert min(offsets) < 20 and max(offsets) > 780
    assert len(set(offsets)) > 500
    others = [jitter_offset("acme/other", T0 + i * 1000, 800, None) for i in range(2000)]
    assert offsets != others
    assert jitter_offset(KEY, T0, 0, None) == 0


def test_the_cap_keeps_an_occurrence_before_the_next_one() -> None:
    """where the next occurrence is nearer than the offset, the run is due 1 ms before it"""
    offsets = {t: jitter_offset(KEY, t, 3_600_000, None) for t in range(T0, T0 + 50_000, 1000)}
    scheduled, offset = max(offsets.items(), key=lambda kv: kv[1])
    assert offset > 1000
    assert jitter_offset(KEY, scheduled, 3_600_000, scheduled + 1000) == 999
    assert jitter_offset(KEY, scheduled, 3_600_000, scheduled + 1) == 0


def test_the_shortest_gap() -> None:
    """the period is the shortest gap between consecutive instants; none for fewer than two"""
    assert shortest_gap([10, 30, 35, 100]) == 5
    assert shortest_gap([10]) is None
    assert shortest_gap(iter([])) is None


# --- registration -----------------------------------------------------------------------------


def _problems(**fields: Any) -> dict[str, str]:
    doc = {"id": "nightly", "handler": "h.run", **fields}
    try:
        validate_job("acme", parse_document(doc), Limits(), T0)
    except JobValidationError as exc:
        return {p.field: p.message for p in exc.problems}
    return {}


def test_jitter_below_the_period_is_accepted_and_stored() -> None:
    """a per-second job takes jitter_ms 999, not 1000; the refusal names the field and the gap"""
    assert _problems(schedule="* * * * * *", jitter_ms=999) == {}
    problem = _problems(schedule="* * * * * *", jitter_ms=1000)["jitter_ms"]
    assert "1000 ms" in problem and "period" in problem
    doc = parse_document({"id": "n", "schedule": "@daily", "handler": "h.run", "jitter_ms": 5})
    spec = validate_job("acme", doc, Limits(), T0)
    assert spec.stored_document["jitter_ms"] == 5


def test_the_period_is_the_shortest_gap_in_the_zone_over_a_dst_change() -> None:
    """a daily 02:30 Berlin job firing both copies of a repeated hour has a period of one hour"""
    daily = {"schedule": "30 2 * * *", "timezone": "Europe/Berlin"}
    assert _problems(**daily, jitter_ms=3_600_000) == {}
    both = {**daily, "dst": {"gap": "shift", "overlap": "both"}}
    assert "jitter_ms" in _problems(**both, jitter_ms=3_600_000)
    assert _problems(**both, jitter_ms=3_599_999) == {}


def test_jitter_on_a_one_off_or_out_of_range_is_refused() -> None:
    """a one-off takes no jitter (0 is none and passes); the range is 0 to JITTER_MAX_MS"""
    once = {"at": "2027-01-01T00:00:00Z"}
    assert "cron schedule only" in _problems(**once, jitter_ms=10)["jitter_ms"]
    assert _problems(**once, jitter_ms=0) == {}
    assert "jitter_ms" in _problems(schedule="@daily", jitter_ms=JITTER_MAX_MS + 1)
    assert "jitter_ms" in _problems(schedule="@daily", jitter_ms=-1)


def test_a_job_without_jitter_keeps_its_document() -> None:
    """jitter_ms absent stays out of the stored document"""
    spec = validate_job(
        "acme", parse_document({"id": "n", "schedule": "@daily", "handler": "h.run"}), Limits(), T0
    )
    assert "jitter_ms" not in spec.stored_document


# --- the plan ---------------------------------------------------------------------------------


def _job(**overrides: object) -> JobEntry:
    values: dict[str, object] = {
        "tenant": "acme",
        "job_id": "nightly",
        "version": 1,
        "next_ms": T0,
        "kind": "cron",
        "schedule": "* * * * * *",
        "timezone": "UTC",
        "dst_gap": "shift",
        "dst_overlap": "first",
        "misfire_policy": "skip",
        "grace_ms": 100,
        "max_catchup": 3,
        "overlap_policy": "allow",
        "jitter_ms": 800,
    }
    values.update(overrides)
    return JobEntry.of(**values)  # type: ignore[arg-type]


def _offset(ms: int) -> int:
    return jitter_offset(KEY, ms, 800, ms + 1000)


# An instant whose offset is well beyond the grace (100 ms), found once.
LATE_S = next(T0 + i * 1000 for i in range(100) if _offset(T0 + i * 1000) > 400)


def test_due_at_is_the_scheduled_instant_plus_its_offset() -> None:
    """a jittered entry is due at scheduled + offset; one without jitter at its instant"""
    cache = ScheduleCache()
    assert due_at(cache, _job(), LATE_S) == LATE_S + _offset(LATE_S)
    assert due_at(cache, _job(jitter_ms=0), LATE_S) == LATE_S


def test_a_jittered_run_keeps_its_scheduled_instant_and_says_when_it_was_due() -> None:
    """claimed at its due instant, the run row is keyed at the scheduled instant, the batch
    records the due one, and the job goes on to its next scheduled occurrence"""
    due = LATE_S + _offset(LATE_S)
    batch = plan_claims([_job(next_ms=LATE_S)], due, ScheduleCache())
    assert (batch.run_ms, batch.run_status) == ([LATE_S], ["pending"])
    assert batch.due == {("acme", "nightly", LATE_S): due}
    assert batch.next_ms == [LATE_S + 1000]


def test_the_grace_is_measured_from_the_jittered_instant() -> None:
    """later than the grace after its scheduled instant but within it after its due one, the
    run is on time; later than the grace after its due one, misfire skips it"""
    due = LATE_S + _offset(LATE_S)
    on_time = plan_claims([_job(next_ms=LATE_S)], due + 100, ScheduleCache())
    assert on_time.run_status == ["pending"]
    unjittered = plan_claims([_job(next_ms=LATE_S, jitter_ms=0)], due + 100, ScheduleCache())
    assert unjittered.run_status == ["skipped"]
    late = plan_claims([_job(next_ms=LATE_S)], due + 101, ScheduleCache())
    assert (late.run_ms, late.run_status, late.run_reason) == ([LATE_S], ["skipped"], ["misfire"])


def test_a_catch_up_leaves_an_occurrence_not_due_yet_for_later() -> None:
    """an occurrence scheduled before now but due after it is not run by a catch-up: it is
    where the job goes on from"""
    last = next(T0 + i * 1000 for i in range(1, 100) if _offset(T0 + i * 1000) > 400)
    now = last + 200  # `last` is scheduled before now, due after it
    batch = plan_claims([_job(misfire_policy="run_all", max_catchup=1000)], now, ScheduleCache())
    assert last not in batch.run_ms
    assert batch.next_ms == [last]
    assert max(batch.run_ms) == last - 1000


def test_a_span_ends_at_the_first_occurrence_due_after_the_grace() -> None:
    """beyond the listed misfires, the span stops at the first occurrence due at or after
    now - grace, which is then on time, though scheduled before it"""

    def next_after(t: int) -> int:
        return (t // 1000 + 1) * 1000

    plan = plan_misfire(
        "skip", 100, 10, 0, 1_500_950, next_after, due=lambda s: s + 900, jitter_ms=1000
    )
    assert len(plan.skipped) == 1000
    assert plan.skipped_span is not None
    assert (plan.skipped_span.start_ms, plan.skipped_span.end_ms) == (1_000_000, 1_500_000)
    assert (plan.run, plan.next_run_at) == ([1_500_000], 1_501_000)


# --- the leader's wheel -----------------------------------------------------------------------


def _row(jitter_ms: int | None, next_ms: int) -> dict[str, Any]:
    return {
        "tenant": "acme", "job_id": "nightly", "shard_id": 0, "status": "active", "version": 1,
        "next_run_at": next_ms, "kind": "cron", "schedule": "* * * * * *", "timezone": "UTC",
        "dst_gap": "shift", "dst_overlap": "first", "misfire_policy": "skip",
        "misfire_grace_ms": 100, "misfire_max_catchup": 3, "overlap_policy": "allow",
        "start_ms": None, "end_ms": None, "after_end": None, "max_runs": None, "calendars": None,
        "jitter_ms": jitter_ms,
    }  # fmt: skip


@pytest.mark.parametrize(("jitter_ms", "offset"), [(800, _offset(LATE_S)), (None, 0)])
def test_the_wheel_holds_a_jittered_entry_at_its_due_instant(
    jitter_ms: int | None, offset: int
) -> None:
    """a jittered job's wheel entry falls due at scheduled + offset and keeps the scheduled
    instant as the pair it expects"""

    async def go() -> None:
        config = LeaderConfig(100, 600_000, 30_000, 100, 1000, 60_000)
        shared = Shared("me", config, None, None, ScheduleCache(), DbClock(), None)  # type: ignore[arg-type]
        leader = ShardLeader(0, shared)
        leader.horizon_end_ms = T0 + 600_000
        leader.apply_job_row(_row(jitter_ms, LATE_S))
        assert leader.wheel.advance(LATE_S + offset - 1) == []
        [(_, due, entry)] = leader.wheel.advance(LATE_S + 5000)
        assert due == LATE_S + offset
        assert isinstance(entry, JobEntry) and entry.next_ms == LATE_S

    asyncio.run(go())


# --- the run envelope -------------------------------------------------------------------------


def test_the_envelope_carries_the_due_instant_only_when_jittered() -> None:
    """encode_run writes `due` only when given; the decoder reads it back, and an envelope
    without it (an older leader's) decodes with none"""
    key = f"{KEY}@{T0}"
    args = (key, "acme", "nightly", T0, 1, 3, "normal", "{}", 1000, "h.run", None, "schedule")
    plain = encode_run(*args)
    assert "due" not in orjson.loads(plain)
    assert RunEnvelope.decode(plain).due is None
    jittered = encode_run(*args, T0 + 312)
    assert orjson.loads(jittered)["due"] == T0 + 312
    env = RunEnvelope.decode(jittered)
    assert env.due == T0 + 312
    assert orjson.loads(env.encode()) == orjson.loads(jittered)


@pytest.mark.parametrize("bad", ["soon", 2**62, True, 1.5])
def test_a_malformed_due_is_refused_naming_the_field(bad: object) -> None:
    """a `due` that is no instant the ledger can hold is an EnvelopeError naming it"""
    from tickwheel.envelopes.parsing import EnvelopeError

    body = orjson.loads(encode_run(
        f"{KEY}@{T0}", "acme", "nightly", T0, 1, 3, "normal", "{}", 1000, "h.run", None,
        "schedule",
    ))  # fmt: skip
    body["due"] = bad
    with pytest.raises(EnvelopeError, match="'due'"):
        RunEnvelope.decode(orjson.dumps(body))


# --- the preview ------------------------------------------------------------------------------


def test_the_preview_names_each_offset_and_the_instant_it_runs_at() -> None:
    """explain_cron with the job's jitter gives each occurrence the pure function's offset,
    its jittered instant (in ms) and a jitter_ms reason; the outlook waits for that instant"""
    schedule = parse_cron("* * * * * *")
    instants = schedule.next_n(T0, 3)
    preview = explain_cron(schedule, instants, after_ms=T0, now_ms=T0, jitter=(KEY, 800))
    body = preview.to_dict()
    assert body["jitter_ms"] == 800
    for instant, occurrence in zip(instants, body["occurrences"], strict=True):
        offset = jitter_offset(KEY, instant, 800, instant + 1000)
        assert occurrence["jitter"] == {"offset_ms": offset, "runs_at": format_ms(instant + offset)}
        assert occurrence["reasons"][-1]["rule"] == "jitter_ms"
    outlook = body["misfire"]
    assert outlook["rule"] == "misfire.grace_ms" and "not due yet" in outlook["text"]
    plain = explain_cron(schedule, instants, after_ms=T0, now_ms=T0).to_dict()
    assert plain["jitter_ms"] is None and plain["occurrences"][0]["jitter"] is None


def test_cron_next_explains_the_jitter_and_wants_a_key() -> None:
    """`cron next --jitter-ms N --explain` names each offset; without --key it exits 2"""
    from click.testing import CliRunner

    from tickwheel.schedule.cli import cron

    runner = CliRunner()
    args = ["next", "* * * * * *", "--now", "2027-01-01T00:00:00Z", "--count", "2"]
    out = runner.invoke(cron, [*args, "--key", KEY, "--jitter-ms", "800", "--json"])
    assert out.exit_code == 0, out.output
    first = orjson.loads(out.output)["occurrences"][0]
    at = 1_798_761_601_000  # 2027-01-01T00:00:01Z
    assert first["jitter"]["offset_ms"] == jitter_offset(KEY, at, 800, at + 1000)
    refused = runner.invoke(cron, [*args, "--jitter-ms", "800", "--explain"])
    assert refused.exit_code == 2 and "--jitter-ms" in refused.output
