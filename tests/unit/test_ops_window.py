"""The status page's throughput window: aligned buckets, and one bucket per slot whatever the
query returned."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.ops.store import Bucket, fill, window

pytestmark = pytest.mark.unit


def test_window_ends_with_the_bucket_holding_now() -> None:
    """the window's last bucket holds now; the window is `buckets` buckets long"""
    start, end = window(1_000_123_456, 60, 10_000)
    assert (start, end) == (1_000_130_000 - 600_000, 1_000_130_000)


def test_window_is_aligned_so_refreshes_see_the_same_buckets() -> None:
    """two instants within one bucket give the same window; the next bucket shifts it by one"""
    assert window(20_000, 3, 10_000) == window(29_999, 3, 10_000) == (0, 30_000)
    assert window(30_000, 3, 10_000) == (10_000, 40_000)


def test_fill_puts_rows_in_their_buckets_and_zeros_elsewhere() -> None:
    """rows land at their bucket index; missing buckets are zero with no lag"""
    row = {
        "bucket": 1,
        "created": 5,
        "published": 4,
        "finished": 3,
        "dead": 1,
        "lag_p50_ms": 12.0,
        "lag_p99_ms": 40.5,
    }
    got = fill([row], 1_000, 3, 10)
    assert got == [
        Bucket(1_000, 0, 0, 0, 0, None, None),
        Bucket(1_010, 5, 4, 3, 1, 12.0, 40.5),
        Bucket(1_020, 0, 0, 0, 0, None, None),
    ]
