"""The benchmark's accounting on crafted rows: percentiles, rates, duplicates, losses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tickwheel.bench.analysis import (
    RunRecord,
    Spread,
    by_tenant,
    cumulative,
    finite,
    lateness,
    percentile,
    summarize,
)
from tickwheel.bench.load import Handler, due_instants, expected_run_keys
from tickwheel.bench.report import plot_tenants

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000  # unix ms


def row(
    key: str, claimed: int, published: int | None, finished: int | None, **kw: object
) -> RunRecord:
    """A run row of job `key` due at T0, instants given in ms after T0."""
    status = str(kw.get("status", "succeeded" if finished is not None else "published"))
    return RunRecord(
        run_key=f"bench/{key}@{T0}",
        scheduled_ms=T0,
        claimed_ms=T0 + claimed,
        published_ms=None if published is None else T0 + published,
        started_ms=None if finished is None else T0 + finished - 1,
        finished_ms=None if finished is None else T0 + finished,
        status=status,
        attempt=int(str(kw.get("attempt", 1))),
    )


def test_percentile_is_nearest_rank() -> None:
    """p50 of 1..10 is 5, p99 is 10, p10 is 1: always a value some run had"""
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 99) == 10.0
    assert percentile(values, 10) == 1.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_missing_runs_make_the_tail_infinite() -> None:
    """runs that never got there count as infinitely late, so they cannot improve a percentile"""
    spread = Spread.of([1.0] * 98, expected=100)
    assert spread.count == 98
    assert spread.p50_s == 1.0
    assert math.isinf(spread.p99_s) and math.isinf(spread.max_s)
    assert finite(spread.p99_s) is None
    assert finite(1.23456) == 1.235


def test_clean_burst() -> None:
    """every expected run claimed, published once and completed: no duplicates, none lost"""
    keys = [f"bench/j{i}@{T0}" for i in range(4)]
    rows = [row(f"j{i}", 100 * i, 200 + 100 * i, 1000 + 1000 * i) for i in range(4)]
    summary = summarize(keys, rows, {k: 1 for k in keys}, T0)
    assert (summary.duplicates, summary.lost, summary.not_completed) == (0, 0, 0)
    assert summary.published.p50_s == 0.3  # published: 0.2, 0.3, 0.4, 0.5 s
    assert summary.published.max_s == 0.5
    assert summary.completed.p99_s == 4.0
    assert summary.claimed_per_s == pytest.approx(4 / 0.3)
    assert summary.throughput_per_s == pytest.approx(4 / 4.0)
    assert summary.statuses == {"succeeded": 4}


def test_duplicates_and_losses_from_rows_and_messages() -> None:
    """a message twice, a row nobody expected, a run without row and one never published"""
    keys = [f"bench/j{i}@{T0}" for i in range(4)]
    rows = [
        row("j0", 0, 10, 20),
        row("j1", 0, 10, 20, attempt=2),
        row("j2", 0, None, None, status="pending"),  # a row, never on a topic
        # j3: no row at all, though a message names it (published then rolled back? lost)
        row("other", 0, 10, 20),  # a run key nobody registered
    ]
    deliveries = {keys[0]: 2, keys[1]: 1, keys[3]: 1, f"bench/other@{T0}": 1}
    s = summarize(keys, rows, deliveries, T0)
    assert s.duplicate_messages == 1 + 1  # j0's second message, and the unexpected key's
    assert s.unexpected_rows == 1
    assert s.duplicates == 3
    assert s.lost == 2  # j2 (no message) and j3 (no row)
    assert s.lost_keys_sample == [keys[2], keys[3]]
    assert s.reattempted == 1
    assert s.not_completed == 2
    assert s.published.count == 2 and math.isinf(s.published.p99_s)


def test_publish_instant_comes_from_the_topic_when_it_has_one() -> None:
    """published uses the broker's first append; recorded keeps the row's published_at"""
    keys = [f"bench/j{i}@{T0}" for i in range(2)]
    rows = [row("j0", 0, 900, 1000), row("j1", 0, 800, 1000)]
    s = summarize(keys, rows, {k: 1 for k in keys}, T0, {keys[0]: T0 + 100})
    assert s.published.max_s == 0.8  # j0 from the topic (0.1 s), j1 from its row (0.8 s)
    assert s.published.p50_s == 0.1
    assert s.recorded.p50_s == 0.8 and s.recorded.max_s == 0.9


def test_lateness_is_against_each_runs_own_instant() -> None:
    """steady load: lateness is published (started) minus that run's scheduled instant"""
    records = [
        RunRecord(f"bench/j{i}@{T0 + 1000 * i}", T0 + 1000 * i, T0 + 1000 * i,
                  T0 + 1000 * i + 50 * (i + 1), T0 + 1000 * i + 100 * (i + 1), None,
                  "running", 1)
        for i in range(10)
    ]  # fmt: skip
    late = lateness([r.run_key for r in records], records)
    assert late.claimed.max_s == 0.0
    assert late.published.p50_s == 0.25
    assert late.published.max_s == 0.5
    assert late.started.p99_s == 1.0
    assert late.published_p999_s == 0.5


def test_lateness_slices_place_the_tail_in_time() -> None:
    """steady load: runs grouped by 10-s slices of their scheduled instant, each slice's own
    claim max and publish p99/max; a run never published makes its slice infinite"""
    records = [
        RunRecord(f"bench/j{i}@{T0 + 1000 * i}", T0 + 1000 * i, T0 + 1000 * i + 10 * i,
                  None if i == 25 else T0 + 1000 * i + (3000 if i == 14 else 100),
                  None, None, "pending", 1)
        for i in range(30)
    ]  # fmt: skip
    late = lateness([r.run_key for r in records], records)
    assert [(s.start_ms - T0, s.runs) for s in late.slices] == [(0, 10), (10_000, 10), (20_000, 10)]
    first, second, third = late.slices
    assert (first.claim_max_s, first.publish_max_s) == (0.09, 0.1)
    assert (second.claim_max_s, second.publish_p99_s, second.publish_max_s) == (0.19, 3.0, 3.0)
    assert third.publish_max_s == math.inf and third.claim_max_s == 0.29


def test_due_instants_and_run_keys_of_a_spread_burst() -> None:
    """jobs spread over [T0, T0 + spread): evenly, the first at T0, run keys from job ids"""
    dues = due_instants(4, T0, 1000)
    assert dues == [T0, T0 + 250, T0 + 500, T0 + 750]
    assert due_instants(3, T0, 0) == [T0] * 3
    assert expected_run_keys(dues[:1]) == [f"bench/hot-0000000@{T0}"]


def test_handler_option() -> None:
    """--handler takes noop or sleep:MS and refuses anything else naming the form"""
    assert Handler.parse("noop").name == "bench.noop"
    assert Handler.parse("sleep:25").payload == {"ms": 25}
    with pytest.raises(ValueError, match="noop or sleep:MS"):
        Handler.parse("sleep:abc")


def test_cumulative_curve() -> None:
    """the plot's curve: sorted seconds since the origin, counting up, missing ones left out"""
    xs, ys = cumulative([T0 + 2000, None, T0 + 500], T0)
    assert xs == [0.5, 2.0]
    assert ys == [1, 2]


def test_figures_per_tenant_split_the_rows_by_the_run_keys_tenant() -> None:
    """by_tenant: each tenant's starts since T0 and completions count only its own runs; a
    run not started is an infinite percentile, not a missing one."""
    rows = [row("a", 1, 2, 500), row("b", 1, 2, 900)]
    other = RunRecord(
        run_key=f"bench-b/x@{T0 + 200}", scheduled_ms=T0 + 200, claimed_ms=T0 + 201,
        published_ms=T0 + 202, started_ms=T0 + 300, finished_ms=T0 + 301, status="succeeded",
        attempt=1,
    )  # fmt: skip
    expected = [r.run_key for r in rows] + [other.run_key, f"bench-b/y@{T0}"]
    figures = by_tenant(expected, [*rows, other], T0)
    assert figures["bench"].runs == 2 and figures["bench"].completed.max_s == 0.9
    assert figures["bench"].started.max_s == 0.899
    b = figures["bench-b"]
    assert b.runs == 2 and b.started.count == 1 and b.started.p50_s == 0.3
    assert b.start_lateness.p50_s == 0.1 and math.isinf(b.started.max_s)


def test_the_tenants_plot_draws_each_tenants_starts(tmp_path: Path) -> None:
    """plot_tenants writes a PNG of each tenant's share of runs started (a run not started
    is left out, a tenant of one run is drawn too)"""
    other = RunRecord(
        run_key=f"bench-b/x@{T0}", scheduled_ms=T0, claimed_ms=T0 + 1, published_ms=T0 + 2,
        started_ms=T0 + 3, finished_ms=T0 + 4, status="succeeded", attempt=1,
    )  # fmt: skip
    rows = [row("a", 1, 2, 500), row("b", 1, 2, None), other]
    path = tmp_path / "deep" / "t.png"
    plot_tenants(path, "two tenants", rows, T0)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
