"""The pure parts of the operators' tools: selection, replay decisions, pacing, input forms."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tickwheel.cli import main
from tickwheel.cli_support import BadInput, table
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.registry_api.ops.dlq import DlqFilter, Letter, select
from tickwheel.registry_api.ops.forms import parse_job_key, parse_rate, parse_since
from tickwheel.registry_api.replay import (
    CHUNK_RUNS,
    Candidate,
    Outcome,
    chunk_size,
    decide,
    pace_delay_s,
)

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000


def _letter(
    tenant: str, job_id: str, scheduled: int, dead_at: int, error: str = "boom", offset: int = 0
) -> Letter:
    run = RunEnvelope(
        f"{tenant}/{job_id}@{scheduled}",
        tenant,
        job_id,
        scheduled,
        3,
        1,
        "normal",
        {},
        1000,
        handler="h.run",
    )
    return Letter(0, offset, DeadLetter(run, error, 3, dead_at))


def test_select_keeps_the_latest_letter_per_run_key() -> None:
    """a run dead-lettered twice is selected once, with its latest death"""
    first = _letter("t", "a", 1, dead_at=10, error="old", offset=0)
    again = _letter("t", "a", 1, dead_at=20, error="new", offset=5)
    other = _letter("t", "b", 1, dead_at=15, offset=3)
    chosen = select([again, other, first], DlqFilter())
    assert [(x.run_key, x.dead.error) for x in chosen] == [("t/b@1", "boom"), ("t/a@1", "new")]


def test_select_filters_orders_by_death_and_cuts_at_limit() -> None:
    """filters combine; the oldest deaths come first and --limit keeps the first N"""
    letters = [
        _letter("t", "a", 1, dead_at=30, error="Timeout talking to X"),
        _letter("t", "a", 2, dead_at=10, error="timeout"),
        _letter("t", "a", 3, dead_at=20, error="refused"),
        _letter("u", "a", 4, dead_at=25, error="timeout"),
        _letter("t", "b", 5, dead_at=5, error="timeout"),
    ]
    chosen = select(letters, DlqFilter(job_id="a", tenant="t", error="TIMEOUT"))
    assert [x.run_key for x in chosen] == ["t/a@2", "t/a@1"]
    assert [x.run_key for x in select(letters, DlqFilter(since_ms=20, limit=2))] == [
        "t/a@3",
        "u/a@4",
    ]


def _candidate(
    run: str | None = "dead", origin: str = "schedule", job: str | None = "active"
) -> Candidate:
    return Candidate("t/a@1", run, origin, job, 5)


def test_a_dead_run_of_a_live_job_is_replayed_with_the_budget() -> None:
    """dead + live job: replay, with --attempts or else the job's max_attempts"""
    assert decide(_candidate(), 2).budget == 2
    assert decide(_candidate(), None).budget == 5
    assert decide(_candidate(job="paused"), None).outcome == Outcome.REPLAYED


@pytest.mark.parametrize(
    ("candidate", "outcome", "reason"),
    [
        (_candidate(run="succeeded"), Outcome.SKIPPED, "succeeded since"),
        (_candidate(run="retrying", origin="replay"), Outcome.SKIPPED, "already replayed"),
        (_candidate(run="running", origin="replay"), Outcome.SKIPPED, "already replayed"),
        (_candidate(run="pending"), Outcome.SKIPPED, "not dead any more"),
        (_candidate(job="deleted"), Outcome.REFUSED, "job was deleted"),
        (_candidate(job=None), Outcome.REFUSED, "job no longer exists"),
        (_candidate(run=None), Outcome.REFUSED, "no longer in job_runs"),
        # Not dead any more wins over a deleted job: there is nothing to refuse.
        (_candidate(run="succeeded", job="deleted"), Outcome.SKIPPED, "succeeded since"),
    ],
)
def test_runs_that_are_not_replayable_say_why(
    candidate: Candidate, outcome: Outcome, reason: str
) -> None:
    """every skip and refusal carries its reason and grants no budget"""
    decision = decide(candidate, 3)
    assert decision.outcome == outcome
    assert decision.reason is not None and reason in decision.reason
    assert decision.budget is None


def test_pacing_holds_the_average_rate() -> None:
    """with a rate, the wait brings the replays so far down to that average; none without"""
    assert pace_delay_s(100.0, 100.0, 10, 5.0) == pytest.approx(2.0)
    assert pace_delay_s(100.0, 103.0, 10, 5.0) == 0.0
    assert pace_delay_s(100.0, 100.0, 10, None) == 0.0
    assert chunk_size(None) == CHUNK_RUNS
    assert chunk_size(0.5) == 1
    assert chunk_size(20) == 20


def test_since_takes_an_instant_or_a_duration_ago() -> None:
    """--since: ISO-8601 with an offset, or 90m / 6h / 7d before now"""
    now = 1_000 * HOUR_MS
    assert parse_since("6h", now) == now - 6 * HOUR_MS
    assert parse_since("90m", now) == now - 90 * 60_000
    assert parse_since("2d", now) == now - 48 * HOUR_MS
    assert parse_since("2026-12-01T10:00:00+01:00", now) == parse_since("2026-12-01T09:00:00Z", 0)
    for bad in ("yesterday", "2026-12-01T09:00:00", "-5m", "5w", ""):
        with pytest.raises(BadInput, match="--since"):
            parse_since(bad, now)


def test_rate_and_job_key_forms() -> None:
    """--rate is N or N/s and positive; JOB is <tenant>/<job_id>"""
    assert parse_rate("50/s") == 50.0
    assert parse_rate("2.5") == 2.5
    for bad in ("0", "fast", "-1/s", "5/m"):
        with pytest.raises(BadInput, match="--rate"):
            parse_rate(bad)
    assert parse_job_key("acme/invoice-42") == ("acme", "invoice-42")
    for bad in ("acme", "/x", "acme/", "a/b/c"):
        with pytest.raises(BadInput, match="JOB"):
            parse_job_key(bad)


def test_table_aligns_and_cuts_long_cells() -> None:
    """a table's columns line up; a long or multi-line cell becomes one cut line"""
    text = table(("A", "LONG"), [("x", "line one\nline two"), ("yy", "z" * 100)])
    lines = text.splitlines()
    assert lines[0] == "A   LONG"
    assert lines[1] == "x   line one line two"
    assert lines[2].startswith("yy  zzz") and lines[2].endswith("…") and len(lines[2]) == 64


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["dlq", "ls", "--since", "last week"], "--since"),
        (["dlq", "replay", "--rate", "lots"], "--rate"),
        (["dlq", "ls", "--limit", "0"], "--limit"),
        (["dlq", "replay", "--attempts", "0"], "--attempts"),
        (["dlq", "show", "not-a-run-key"], "run_key"),
        (["runs", "show", "acme/x"], "run_key"),
        (["runs", "ls", "--status", "zombie"], "--status"),
        (["jobs", "pause", "no-tenant"], "JOB"),
        (["jobs", "show", "a/b/c"], "JOB"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    """bad input fails before any service is contacted: exit 2, one line naming the field"""
    # Unreachable services: reaching one would fail with exit 1, not 2.
    env = {"TICKWHEEL_KAFKA": "127.0.0.1:1", "TICKWHEEL_DSN": "postgresql://x@127.0.0.1:1/x"}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert needle in result.stderr
    assert "Traceback" not in result.output
