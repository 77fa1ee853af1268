"""Full-jitter backoff bounds and the attempt outcome table of workers/retry.py."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwheel.domain import RunStatus
from tickwheel.workers.retry import backoff_ceiling_ms, decide, full_jitter_ms

pytestmark = pytest.mark.unit


@given(
    attempt=st.integers(0, 200),
    base=st.integers(0, 10**7),
    extra=st.integers(0, 10**9),
    seed=st.integers(0, 2**32),
)
def test_full_jitter_stays_within_zero_and_capped_exponential(
    attempt: int, base: int, extra: int, seed: int
) -> None:
    """the delay is always within [0, min(cap, base·2^attempt)]"""
    cap = base + extra
    rng = random.Random(seed)
    delay = full_jitter_ms(attempt, base, cap, rng.randint)
    assert 0 <= delay <= min(cap, base * 2**attempt)


def test_ceiling_doubles_then_caps() -> None:
    """the ceiling is base·2^attempt until the cap"""
    assert [backoff_ceiling_ms(a, 100, 1000) for a in range(6)] == [100, 200, 400, 800, 1000, 1000]


def test_full_jitter_reaches_both_ends_of_the_window() -> None:
    """the draw is over the whole window: both 0 and the ceiling are possible"""
    assert full_jitter_ms(3, 100, 10_000, lambda lo, hi: lo) == 0
    assert full_jitter_ms(3, 100, 10_000, lambda lo, hi: hi) == 800


def test_full_jitter_spreads_over_the_window() -> None:
    """10,000 draws cover the window roughly uniformly (each quarter gets 20-30 %)"""
    rng = random.Random(7)
    delays = [full_jitter_ms(2, 1000, 60_000, rng.randint) for _ in range(10_000)]
    quarters = [sum(1 for d in delays if q * 1000 <= d < (q + 1) * 1000) for q in range(4)]
    assert all(2000 <= n <= 3000 for n in quarters), quarters


def test_negative_inputs_are_refused() -> None:
    """a negative attempt, base or cap is a programming error, not a delay"""
    with pytest.raises(ValueError, match="must not be negative"):
        backoff_ceiling_ms(-1, 10, 10)


@pytest.mark.parametrize(
    ("error", "permanent", "attempt", "status"),
    [
        (None, False, 1, RunStatus.SUCCEEDED),
        (None, False, 5, RunStatus.SUCCEEDED),
        ("boom", False, 1, RunStatus.RETRYING),
        ("boom", False, 4, RunStatus.RETRYING),
        ("boom", False, 5, RunStatus.DEAD),
        ("boom", True, 1, RunStatus.DEAD),
    ],
)
def test_decision_table(error: str | None, permanent: bool, attempt: int, status: str) -> None:
    """success, retry while attempts remain, dead when permanent or exhausted (max 5)"""
    got = decide(
        error=error,
        permanent=permanent,
        attempt=attempt,
        max_attempts=5,
        base_ms=100,
        cap_ms=1000,
        draw=lambda lo, hi: hi,
    )
    assert got.status == status
    if status == RunStatus.RETRYING:
        assert got.retry_in_ms == min(1000, 100 * 2**attempt) and got.error == "boom"
    else:
        assert got.retry_in_ms is None


def test_exhausted_error_says_which_attempt() -> None:
    """the dead run's error names the attempt count, so the DLQ reader sees it was exhausted"""
    got = decide(error="boom", permanent=False, attempt=3, max_attempts=3, base_ms=1, cap_ms=1)
    assert got.error == "boom (attempt 3 of 3)"
