"""The per-host token bucket and circuit breaker (pure, driven by the caller's clock)."""

from __future__ import annotations

import bisect
import heapq

import pytest

from tickwheel.workers.limits import BreakerState, CircuitBreaker, TokenBucket

pytestmark = pytest.mark.unit


def _send_times(bucket: TokenBucket, starts: list[float]) -> list[float]:
    """When each caller sends, in a simulation of callers starting at `starts`: a caller asks
    the bucket, sleeps as told, asks again, and sends on a successful take (clock monotonic)."""
    events = [(start, i) for i, start in enumerate(starts)]
    heapq.heapify(events)
    sent = []
    while events:
        now, caller = heapq.heappop(events)
        wait = bucket.take(now)
        if wait > 0:
            heapq.heappush(events, (now + wait, caller))
        else:
            sent.append(now)
    return sent


def test_bucket_serves_burst_then_paces_at_rate() -> None:
    """10 at once, then one per 1/rate"""
    bucket = TokenBucket(rate_per_s=100, burst=10)
    sent = _send_times(bucket, [0.0] * 15)
    assert sent[:10] == [0.0] * 10
    assert sent[10:] == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05])


def test_bucket_never_exceeds_rate_plus_burst_per_second() -> None:
    """callers starting in bunches, some late, still send at most rate + burst in any second"""
    bucket = TokenBucket(rate_per_s=50, burst=20)
    starts = sorted([0.0] * 100 + [0.7 + i / 1000 for i in range(100)] + [3.0] * 100)
    sent = sorted(_send_times(bucket, starts))
    for i, start in enumerate(sent):
        assert bisect.bisect_left(sent, start + 1.0 - 1e-9) - i <= 50 + 20


def test_bucket_refills_up_to_burst_only() -> None:
    """a long idle time refills to `burst`, not more"""
    bucket = TokenBucket(rate_per_s=10, burst=3)
    bucket.take(0.0)
    assert [bucket.take(100.0) for _ in range(4)] == pytest.approx([0, 0, 0, 0.1])


def test_breaker_opens_after_k_failures_and_half_opens_after_cooldown() -> None:
    """closed → open after K consecutive failures → one trial after the cool-down → closed"""
    breaker = CircuitBreaker(failures_to_open=3, cooldown_s=10)
    for t in range(3):
        assert breaker.allow(t)
        breaker.failed(t)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow(5)
    assert breaker.allow(13)  # the trial call
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.allow(13.5)  # one trial at a time
    breaker.succeeded()
    assert breaker.state is BreakerState.CLOSED and breaker.allow(14)


def test_breaker_failed_trial_reopens() -> None:
    """a failing trial call opens the breaker for a new cool-down"""
    breaker = CircuitBreaker(failures_to_open=1, cooldown_s=10)
    breaker.failed(0)
    assert breaker.allow(10)
    breaker.failed(10)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow(19) and breaker.allow(20)


def test_breaker_success_resets_the_count() -> None:
    """failures must be consecutive: a success in between starts the count again"""
    breaker = CircuitBreaker(failures_to_open=2, cooldown_s=10)
    breaker.failed(0)
    breaker.succeeded()
    breaker.failed(1)
    assert breaker.state is BreakerState.CLOSED
