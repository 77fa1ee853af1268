"""A job's next fire time from its Timing, asked of a cache a caller owns."""

from __future__ import annotations

import threading

import pytest

from tickwheel.schedule import (
    LockedScheduleCache,
    ScheduleCache,
    Timing,
    first_run_at,
    next_fire_after,
    parse_at,
    parse_cron,
)

pytestmark = pytest.mark.unit

NOW = parse_at("2026-03-01T00:00:00Z")


def test_cron_timing_matches_the_parsed_schedule() -> None:
    """a cron Timing's next fire is parse_cron's, with the zone, the key and the DST policies"""
    timing = Timing("acme/a", "H 9 * * *", timezone="Europe/Berlin", dst_gap="skip")
    expected = parse_cron("H 9 * * *", tz="Europe/Berlin", key="acme/a", dst_gap="skip")
    cache = ScheduleCache()
    assert next_fire_after(cache, timing, NOW) == expected.next_after(NOW)
    assert first_run_at(cache, timing, NOW) == expected.next_after(NOW)


def test_one_off_fires_once_and_keeps_a_past_instant() -> None:
    """a one-off's next fire is its instant while ahead; its first run keeps a past instant"""
    at = NOW - 5_000
    timing = Timing("acme/once", at_ms=at)
    cache = ScheduleCache()
    assert next_fire_after(cache, timing, at - 1) == at
    assert next_fire_after(cache, timing, at) is None
    assert first_run_at(cache, timing, NOW) == at
    assert cache.stats().calls == 0  # a one-off never asks the cache


def test_locked_cache_answers_like_the_plain_one_from_many_threads() -> None:
    """the shared, locked cache gives every thread the answers a private cache gives"""
    timings = [Timing(f"acme/j{i}", "*/5 * * * *" if i % 2 else "H * * * *") for i in range(40)]
    plain = ScheduleCache()
    expected = [next_fire_after(plain, t, NOW + i) for i, t in enumerate(timings)]
    shared = LockedScheduleCache()
    found: list[list[int | None]] = []

    def ask() -> None:
        found.append([next_fire_after(shared, t, NOW + i) for i, t in enumerate(timings)])

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [expected] * 4
    assert shared.stats().calls == 4 * len(timings)
