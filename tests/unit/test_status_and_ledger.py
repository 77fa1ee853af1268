"""Pure parts of `tickwheel status` and of the demo's ledger check (on the harnesses' checker)."""

from __future__ import annotations

import pytest

from tickwheel.bench.demo.check import check_ledger
from tickwheel.bench.ledger import Execution, RunRow
from tickwheel.deployment import member_data, parse_member_data
from tickwheel.registry_api.ops.status import bucket_delta, parse_scheduler_metrics, quantile

pytestmark = pytest.mark.unit

T = "acme"


def test_quantile_is_the_bound_of_the_bucket_holding_it() -> None:
    """p50 and p99 of a cumulative histogram are the upper bounds of their buckets"""
    buckets = [(0.1, 50.0), (0.5, 98.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert quantile(buckets, 0.5) == 0.1
    assert quantile(buckets, 0.99) == 1.0
    assert quantile([(0.1, 0.0), (float("inf"), 0.0)], 0.5) is None


def test_bucket_delta_covers_only_the_interval_and_survives_a_restart() -> None:
    """the difference of two reads is the interval's histogram; a counter that went down
    (the process restarted) gives the new read as it is"""
    before = [(0.1, 5.0), (float("inf"), 10.0)]
    now = [(0.1, 5.0), (float("inf"), 30.0)]
    assert bucket_delta(now, before) == [(0.1, 0.0), (float("inf"), 20.0)]
    assert bucket_delta(before, now) == before
    assert bucket_delta(now, None) == now


def test_scheduler_metrics_are_read_from_the_exposition() -> None:
    """wheel entries per shard, the lag buckets and the shards led come out of the text"""
    text = "\n".join(
        [
            "# TYPE tickwheel_scheduler_wheel_entries gauge",
            'tickwheel_scheduler_wheel_entries{shard="3"} 12.0',
            "# TYPE tickwheel_scheduler_dispatch_lag_seconds histogram",
            'tickwheel_scheduler_dispatch_lag_seconds_bucket{le="0.5"} 4.0',
            'tickwheel_scheduler_dispatch_lag_seconds_bucket{le="+Inf"} 5.0',
            "tickwheel_scheduler_dispatch_lag_seconds_count 5.0",
            "tickwheel_scheduler_dispatch_lag_seconds_sum 1.0",
            "# TYPE tickwheel_scheduler_shards_led gauge",
            "tickwheel_scheduler_shards_led 2.0",
            "",
        ]
    )
    wheels, buckets, led = parse_scheduler_metrics(text)
    assert wheels == {3: 12}
    assert buckets == [(0.5, 4.0), (float("inf"), 5.0)]
    assert led == 2


def test_member_node_data_round_trips_and_tolerates_old_nodes() -> None:
    """a member node advertises its metrics address; an old node (just the id) has none"""
    assert parse_member_data("a", member_data("a", "host:9100")) == "host:9100"
    assert parse_member_data("a", member_data("a", None)) is None
    assert parse_member_data("a", b"a") is None


def _row(job: str, ms: int, status: str) -> RunRow:
    return RunRow(T, job, ms, status, attempt=1)


def _ran(key: str, attempt: int, event: str) -> Execution:
    return Execution(f"{T}/{key}", attempt, "w", event)


def test_a_clean_ledger_has_nothing_lost_and_no_duplicates() -> None:
    """every due occurrence with one finished row and one successful execution passes"""
    due = {"j": [1000, 2000], "s": [3000]}
    rows = [_row("j", 1000, "succeeded"), _row("j", 2000, "succeeded"), _row("s", 3000, "skipped")]
    runs = [_ran("j@1000", 1, "ok"), _ran("j@2000", 1, "failed"), _ran("j@2000", 2, "ok")]
    report = check_ledger(due, {}, rows, runs, T)
    verdict = report.verdict
    assert (verdict.expected, report.lost, report.duplicates, verdict.unexpected) == (3, 0, [], [])


def test_each_way_of_losing_a_run_is_counted() -> None:
    """missing rows, unfinished or dead rows, unclaimed due instants and successes the
    handler never saw each count as lost; a second success of one key is a duplicate"""
    due = {"j": [1000, 2000, 3000, 4000]}
    rows = [_row("j", 2000, "retrying"), _row("j", 3000, "succeeded"), _row("j", 4000, "succeeded")]
    runs = [_ran("j@4000", 1, "ok"), _ran("j@4000", 2, "ok")]
    report = check_ledger(due, {"j": [5000]}, rows, runs, T)
    verdict = report.verdict
    assert verdict.missing == [f"{T}/j@1000"]
    assert verdict.unfinished == [f"{T}/j@2000 (retrying)"]
    assert verdict.unexecuted == [f"{T}/j@3000"]
    assert report.undispatched == [f"{T}/j@5000"]
    assert report.lost == 4
    assert report.duplicates == [f"{T}/j@4000"]
