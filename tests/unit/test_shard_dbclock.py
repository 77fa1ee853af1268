"""The leaders' clock follows the database's clock and never runs ahead of it (I8)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tickwheel.shards.dbclock import DbClock

pytestmark = pytest.mark.unit


class _SlowDatabase:
    """Answers with its clock read at the start of a slow round trip."""

    def __init__(self, skew_ms: int, delay_s: float) -> None:
        self.skew_ms = skew_ms
        self.delay_s = delay_s
        self.answered: list[int] = []

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.skew_ms

    async def fetchval(self, _query: str) -> int:
        value = self.now_ms()
        self.answered.append(value)
        await asyncio.sleep(self.delay_s)
        return value


def test_clock_tracks_a_skewed_database_and_is_never_ahead() -> None:
    """after a sync over a slow round trip the estimate is behind the database by at most the
    round trip plus a millisecond, and never ahead of it"""

    async def go() -> None:
        db = _SlowDatabase(skew_ms=-5_000, delay_s=0.05)
        clock = DbClock()
        await clock.sync(db)  # type: ignore[arg-type]
        for _ in range(20):
            estimate = clock.now_ms()
            truth = db.now_ms()
            assert estimate <= truth
            assert truth - estimate <= clock.round_trip_ms + 25  # + scheduling jitter
            await asyncio.sleep(0.005)

    asyncio.run(go())


def test_clock_refuses_to_answer_before_a_sync() -> None:
    """asking for the time before the first sync is a programming error"""
    with pytest.raises(RuntimeError, match="sync"):
        DbClock().now_ms()
