"""The GCRA arithmetic of a target host's cluster-wide rate (workers/gcra.py): bursts, pacing,
the horizon, and the bound rate + burst in any second over random batches of many workers."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.workers.gcra import (
    US_PER_S,
    Rate,
    advanced,
    granted,
    next_try_us,
    send_delays_us,
)

pytestmark = pytest.mark.unit


def _grant(tat: int, now: int, wanted: int, rate: Rate, horizon: int) -> tuple[int, list[int]]:
    """What one `target_take` does: the new TAT and the absolute instants granted."""
    count = granted(tat, now, wanted, rate, horizon)
    start = max(tat, now)
    instants = [now + d for d in send_delays_us(start, now, count, rate)]
    return (advanced(tat, now, count, rate) if count else tat), instants


def test_an_idle_host_grants_the_burst_at_once_then_one_per_interval() -> None:
    """10 at once, then one every 1/rate, as far as the horizon reaches"""
    rate = Rate.of(100, 10)
    tat, instants = _grant(0, 5 * US_PER_S, 15, rate, horizon=US_PER_S)
    now = 5 * US_PER_S
    assert instants[:10] == [now] * 10
    assert [i - now for i in instants[10:]] == [10_000, 20_000, 30_000, 40_000, 50_000]
    assert tat == now + 15 * 10_000


def test_the_horizon_bounds_what_one_statement_grants() -> None:
    """with a 100 ms horizon at 100/s, a burst of 10 and 10 more: 20 of 50; the rest are told
    when to ask again, which is when the next instant comes within the horizon"""
    rate = Rate.of(100, 10)
    now = 0
    count = granted(0, now, 50, rate, 100_000)
    assert count == 20
    tat = advanced(0, now, count, rate)
    wait = next_try_us(tat, now, rate, 100_000)
    assert wait == 10_000
    assert granted(tat, now + wait, 29, rate, 100_000) == 1


def test_nothing_is_granted_before_the_horizon_reaches_the_next_instant() -> None:
    """a host whose TAT lies far ahead grants nothing now, and says how long to wait"""
    rate = Rate.of(10, 1)
    assert granted(5 * US_PER_S, 0, 3, rate, 100_000) == 0
    assert next_try_us(5 * US_PER_S, 0, rate, 100_000) == 5 * US_PER_S - 100_000


def test_a_rate_needs_a_positive_rate_and_a_burst() -> None:
    """0/s or a burst of 0 is refused"""
    with pytest.raises(ValueError):
        Rate.of(0, 1)
    with pytest.raises(ValueError):
        Rate.of(10, 0)


@settings(max_examples=300, deadline=None)
@given(
    rate_per_s=st.sampled_from([1, 7, 50, 500]),
    burst=st.integers(1, 60),
    horizon_ms=st.sampled_from([0, 10, 100, 1000]),
    asks=st.lists(
        st.tuples(st.integers(0, 400_000), st.integers(1, 80)),  # (us after the last, wanted)
        min_size=1,
        max_size=60,
    ),
)
def test_no_second_holds_more_than_rate_plus_burst_instants(
    rate_per_s: int, burst: int, horizon_ms: int, asks: list[tuple[int, int]]
) -> None:
    """whatever the batches asked for by any number of workers, and whenever, the instants
    granted never put more than rate + burst sends in any one-second window, and none lies
    before the moment it was granted or beyond the horizon"""
    rate = Rate.of(rate_per_s, burst)
    horizon = horizon_ms * 1000
    tat, now, sent = 0, US_PER_S, []
    for gap, wanted in asks:
        now += gap
        tat, instants = _grant(tat, now, wanted, rate, horizon)
        assert all(now <= i <= now + horizon for i in instants)
        sent.extend(instants)
    sent.sort()
    for i, start in enumerate(sent):
        in_window = bisect.bisect_left(sent, start + US_PER_S) - i
        assert in_window <= rate_per_s + burst


@settings(max_examples=100, deadline=None)
@given(
    rate_per_s=st.sampled_from([5, 50, 500]),
    burst=st.integers(1, 20),
    wanted=st.integers(1, 300),
)
def test_callers_that_ask_again_when_told_are_all_served_at_the_rate(
    rate_per_s: int, burst: int, wanted: int
) -> None:
    """callers that got no instant and ask again after `next_try_us` are all served, and the
    last of them no sooner than the rate allows"""
    rate = Rate.of(rate_per_s, burst)
    horizon = 100_000
    tat, now, sent, left = 0, US_PER_S, [], wanted
    for _ in range(10 * wanted + 10):
        tat, instants = _grant(tat, now, left, rate, horizon)
        sent.extend(instants)
        left -= len(instants)
        if not left:
            break
        now += max(1, next_try_us(tat, now, rate, horizon))
    assert left == 0
    expected_span = max(0, wanted - burst) * rate.interval_us
    assert max(sent) - min(sent) >= expected_span
