"""Failed authentications per client address: a token bucket drawn only by failures."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.auth import FailedAuthLimiter, client_of

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


def test_tracked_addresses_are_bounded_forgetting_the_fullest_buckets() -> None:
    """past max_clients, the half of the buckets holding the most tokens is forgotten: the
    client that failed most keeps its limit"""
    clock = Clock()
    limiter = FailedAuthLimiter(burst=2, per_s=1.0, max_clients=4, clock=clock)
    limiter.failed("a")
    limiter.failed("a")  # empty
    for other in ("b", "c", "d"):
        limiter.failed(other)  # one token left each
    limiter.failed("e")  # over the bound: b and c (or d) go, a stays
    assert limiter.retry_after_s("a") == pytest.approx(1.0)


def test_many_addresses_cannot_reset_the_limit_of_one() -> None:
    """issue 28 (low): an address that used up its failures stays refused after more than
    10,000 other addresses failed once each (the limiter used to forget everything then)"""
    clock = Clock()
    limiter = FailedAuthLimiter(burst=20, per_s=1.0, clock=clock)
    for _ in range(20):
        limiter.failed("198.51.100.1")
    for n in range(15_000):
        limiter.failed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}")
    assert limiter.retry_after_s("198.51.100.1") > 0


@pytest.mark.parametrize(
    ("host", "client"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        (None, "unknown"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv6_client_is_its_64(host: str | None, client: str) -> None:
    """issue 28 (low): the addresses of one IPv6 /64 share a bucket (one host usually has the
    whole /64); IPv4 and IPv4-mapped addresses count alone"""
    assert client_of(host) == client
