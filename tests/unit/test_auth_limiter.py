"""Failed authentications per client address: a token bucket drawn only by failures."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.auth import FailedAuthLimiter

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_refill_per_address() -> None:
    """3 failures pass, the 4th waits 1/rate seconds; other addresses are untouched; the
    bucket refills with time"""
    clock = Clock()
    limiter = FailedAuthLimiter(burst=3, per_s=0.5, clock=clock)
    for _ in range(3):
        assert limiter.retry_after_s("a") == 0
        limiter.failed("a")
    assert limiter.retry_after_s("a") == pytest.approx(2.0)
    assert limiter.retry_after_s("b") == 0
    clock.now += 2.0
    assert limiter.retry_after_s("a") == 0


def test_tracked_addresses_are_bounded() -> None:
    """past max_clients, full buckets are forgotten first, then everything"""
    clock = Clock()
    limiter = FailedAuthLimiter(burst=2, per_s=1.0, max_clients=2, clock=clock)
    limiter.failed("a")
    limiter.failed("a")
    limiter.failed("b")
    limiter.failed("c")  # a and b are not full: the table is cleared for c
    assert limiter.retry_after_s("a") == 0
    assert limiter.retry_after_s("c") == 0
