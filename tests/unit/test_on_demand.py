"""Runs on demand, the pure parts: backfill ranges and their occurrences, the fold's answers to
trigger/backfill, the Kafka shapes, and overlap at a trigger's first dispatch."""

from __future__ import annotations

from typing import Any

import pytest

from tickwheel.clock import format_ms
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.registrations import Registration
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.registry_api import on_demand
from tickwheel.registry_api.document import JobValidationError
from tickwheel.registry_api.on_demand import (
    BackfillRefused,
    BackfillRequest,
    RunLimits,
    TriggerRequest,
    backfill_window,
    occurrences,
    retention_start_ms,
    spacing_ms,
)
from tickwheel.registry_api.state import Op, Outcome, StoredJob, apply
from tickwheel.schedule import Timing, next_fire
from tickwheel.schedule.instants import parse_instant
from tickwheel.shards.plan import RetryEntry, plan_first_dispatch

pytestmark = pytest.mark.unit

NOW = parse_instant("2026-11-30T12:00:00Z")
DAILY = Timing(key="acme/daily", schedule="0 9 * * *", timezone="Europe/Berlin")
LIMITS = RunLimits()


def _ms(text: str) -> int:
    return parse_instant(text)


def test_occurrences_are_those_of_the_schedule_in_the_half_open_range() -> None:
    """[from, to): the first instant is included, the last excluded, zone applied"""
    found = occurrences(
        DAILY, _ms("2026-11-01T08:00:00Z"), _ms("2026-11-03T08:00:00Z"), NOW, LIMITS
    )
    assert found == [_ms("2026-11-01T08:00:00Z"), _ms("2026-11-02T08:00:00Z")]


def test_occurrences_follow_the_jobs_dst_gap_policy() -> None:
    """02:30 Berlin on the spring-forward day: shift fires at 03:00 local, skip not at all"""
    base = {"key": "acme/j", "schedule": "30 2 * * *", "timezone": "Europe/Berlin"}
    window = (_ms("2026-03-29T00:00:00Z"), _ms("2026-03-30T00:00:00Z"))
    limits = RunLimits(retention_days=3650)
    shift = occurrences(Timing(**base, dst_gap="shift"), *window, NOW, limits)
    skip = occurrences(Timing(**base, dst_gap="skip"), *window, NOW, limits)
    assert (shift, skip) == ([_ms("2026-03-29T01:00:00Z")], [])


@pytest.mark.parametrize(
    ("start", "end", "field", "needle"),
    [
        ("2026-11-03T00:00:00Z", "2026-11-02T00:00:00Z", "to", "after 'from'"),
        ("2026-11-29T00:00:00Z", "2026-12-01T00:00:00Z", "to", "future"),
        ("2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z", "from", "retention (30 days)"),
    ],
)
def test_ranges_that_cannot_be_run_are_refused_naming_the_field(
    start: str, end: str, field: str, needle: str
) -> None:
    """an empty range, one into the future and one before the retention are refused"""
    with pytest.raises(BackfillRefused) as refused:
        occurrences(DAILY, _ms(start), _ms(end), NOW, LIMITS)
    assert refused.value.field == field and needle in refused.value.message


def test_too_many_occurrences_are_refused_saying_where_to_split() -> None:
    """more occurrences than the limit: refused with the limit and the instant before which
    the first `limit` occurrences lie"""
    every_minute = Timing(key="acme/m", schedule="* * * * *")
    end = _ms("2026-11-29T00:00:00Z")
    with pytest.raises(BackfillRefused) as refused:
        occurrences(every_minute, end - 1234 * 60_000, end, NOW, RunLimits(backfill_max_runs=1000))
    assert refused.value.field == "to"
    assert "more than 1,000 occurrences" in refused.value.message
    assert "at most 1,000" in refused.value.message
    split = format_ms(end - 234 * 60_000)  # occurrence 1,001: [from, split) holds 1,000
    assert f"lie before {split}" in refused.value.message


def test_an_oversize_range_is_refused_after_a_bounded_count() -> None:
    """issue 28 finding 4: a per-second job over 25 days (2,160,000 occurrences) is refused
    after counting one past the limit, not a million"""
    every_second = Timing(key="acme/s", schedule="* * * * * *")
    end = _ms("2026-11-29T00:00:00Z")
    steps = 0
    real = next_fire.next_fire_after

    def counted(*args: Any) -> int | None:
        nonlocal steps
        steps += 1
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(on_demand, "next_fire_after", counted)
        with pytest.raises(BackfillRefused, match="more than 10,000 occurrences"):
            occurrences(every_second, end - 25 * 86_400_000, end, NOW, RunLimits())
    assert steps == 10_001


def test_retention_start_and_spacing() -> None:
    """the retention starts at midnight UTC N days back; 100/s spaces runs 10 ms apart"""
    assert retention_start_ms(NOW, 30) == _ms("2026-10-31T00:00:00Z")
    assert spacing_ms(100.0) == 10.0


def test_backfill_window_names_each_bad_field() -> None:
    """missing, malformed and unknown fields are each named; a good body parses"""
    assert backfill_window({"from": "2026-11-01T00:00:00Z", "to": "2026-11-02T00:00:00+01:00"}) == (
        BackfillRequest(_ms("2026-11-01T00:00:00Z"), _ms("2026-11-01T23:00:00Z"))
    )
    with pytest.raises(JobValidationError) as bad:
        backfill_window({"from": "2026-11-01", "extra": 1})
    assert {p.field for p in bad.value.problems} == {"from", "to", "extra"}
    with pytest.raises(JobValidationError):
        backfill_window(["not", "an", "object"])


def _job(status: str) -> StoredJob:
    return StoredJob("acme", "j", {"id": "j"}, status, 3, None)


@pytest.mark.parametrize(
    ("status", "kind", "outcome"),
    [
        ("active", "trigger", Outcome.TRIGGERED),
        ("paused", "trigger", Outcome.TRIGGERED),
        ("paused", "backfill", Outcome.BACKFILLED),
        ("completed", "trigger", Outcome.CONFLICT),
        ("completed", "backfill", Outcome.CONFLICT),
        ("deleted", "trigger", Outcome.NOT_FOUND),
    ],
)
def test_the_fold_allows_runs_on_demand_of_live_jobs_only(
    status: str, kind: str, outcome: Outcome
) -> None:
    """trigger and backfill change no job; completed one-offs conflict, deleted jobs are gone"""
    current = _job(status)
    request: Any = TriggerRequest() if kind == "trigger" else BackfillRequest(0, 1)
    job, got = apply(current, Op(kind, "acme", "j", request=request), NOW)
    assert got is outcome and job is current
    assert not got.changed


def test_kafka_trigger_and_backfill_shapes() -> None:
    """trigger takes an optional idempotency key; backfill needs from and to; neither takes a
    version; the fields round-trip"""
    trig = Registration.decode(
        b'{"op": "trigger", "tenant": "acme", "id": "j", "idempotency_key": "k"}'
    )
    assert (trig.op, trig.idempotency_key) == ("trigger", "k")
    fill = Registration("backfill", "acme", id="j", window_from="a", window_to="b")
    assert Registration.decode(fill.encode()) == fill
    for raw, needle in [
        (b'{"op": "backfill", "tenant": "a", "id": "j", "from": "x"}', "'to' is missing"),
        (b'{"op": "trigger", "tenant": "a", "id": "j", "version": 2}', "'version'"),
        (b'{"op": "pause", "tenant": "a", "id": "j", "from": "x"}', "'backfill' only"),
        (b'{"op": "pause", "tenant": "a", "id": "j", "idempotency_key": "k"}', "'trigger' only"),
    ]:
        with pytest.raises(EnvelopeError, match=needle):
            Registration.decode(raw)


def test_run_envelopes_carry_an_optional_origin() -> None:
    """origin round-trips when set and is absent (None) in older envelopes"""
    env = RunEnvelope("a/j@5", "a", "j", 5, 1, 1, "normal", {}, 1000, handler="h", origin="trigger")
    assert RunEnvelope.decode(env.encode()).origin == "trigger"
    plain = RunEnvelope("a/j@5", "a", "j", 5, 1, 1, "normal", {}, 1000, handler="h")
    assert "origin" not in plain.to_dict() and RunEnvelope.decode(plain.encode()).origin is None


def _due(job: str, retry_ms: int) -> RetryEntry:
    return RetryEntry("acme", job, retry_ms, retry_ms, attempt=0)


def test_first_dispatch_applies_overlap_like_a_scheduled_occurrence() -> None:
    """allow runs all; skip runs one when idle and skips while busy; buffer_one runs one,
    holds the next and skips the rest"""
    due = [_due(job, ms) for job in ("free", "skip", "busy", "buf") for ms in (1, 2, 3)]
    policies = {("acme", "skip"): "skip", ("acme", "busy"): "skip", ("acme", "buf"): "buffer_one"}
    plan = plan_first_dispatch(due, policies, {("acme", "busy"): (1, 0)})

    def of(entries: list[RetryEntry], job: str) -> list[int]:
        return [e.retry_ms for e in entries if e.job_id == job]

    assert of(plan.run, "free") == [1, 2, 3]
    assert (of(plan.run, "skip"), of(plan.skip, "skip")) == ([1], [2, 3])
    assert (of(plan.run, "busy"), of(plan.skip, "busy")) == ([], [1, 2, 3])
    assert (of(plan.run, "buf"), of(plan.hold, "buf"), of(plan.skip, "buf")) == ([1], [2], [3])


def test_a_nul_in_a_backfill_instant_is_refused_naming_the_field() -> None:
    """issue 28 (low): 'from' with a NUL and text after it is refused (it was read up to the
    NUL), over HTTP and Kafka alike (both read the window here)"""
    with pytest.raises(JobValidationError) as refused:
        backfill_window({"from": "2026-11-01T00:00:00Z\x00ignored", "to": "2026-11-02T00:00:00Z"})
    assert [p.field for p in refused.value.problems] == ["from"]


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("fix-4711-retest", True),
        ("k" * 255, True),
        ("with space", True),
        ("", False),
        ("k" * 256, False),
        ("nul\x00", False),
        ("tab\t", False),
        ("del\x7f", False),
        ("caf\u00e9", False),
    ],
)
def test_one_rule_for_idempotency_keys(key: str, ok: bool) -> None:
    """issue 28 (low): an idempotency key is 1 to 255 printable ASCII characters, one rule for
    HTTP, Kafka and the CLI, naming the field as each caller knows it"""
    if ok:
        assert on_demand.checked_idempotency_key(key, "Idempotency-Key") == key
        return
    with pytest.raises(JobValidationError) as refused:
        on_demand.checked_idempotency_key(key, "--idempotency-key")
    assert [p.field for p in refused.value.problems] == ["--idempotency-key"]
