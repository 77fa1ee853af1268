"""The cached evaluator: same answers as parse_cron, parse once, compute once, bounded memory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schedule import ScheduleCache, ScheduleError, parse_at, parse_cron

pytestmark = pytest.mark.unit

T0 = parse_at("2024-10-26T12:00:00Z")  # a day before Europe's fall-back night
DAY_MS = 86_400_000  # milliseconds

REQUESTS = st.tuples(
    st.sampled_from(["0 9 * * 1-5", "30 2 * * *", "*/15 * * * *", "H H * * *", "H/20 * * * * *"]),
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    st.sampled_from(["acme/a", "acme/b", "globex/c"]),
    st.sampled_from(["shift", "skip"]),
    st.sampled_from(["first", "last", "both"]),
    st.integers(T0 - 2 * DAY_MS, T0 + 10 * DAY_MS),
)


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(REQUESTS, min_size=1, max_size=30), window=st.integers(2, 6))
def test_cached_answers_equal_uncached_ones(
    calls: list[tuple[str, str, str, str, str, int]], window: int
) -> None:
    """Any sequence of calls, in any order of instants, gets parse_cron's own answers."""
    cache = ScheduleCache(window=window, max_requests=4, max_evaluations=3)
    for expr, tz, key, gap, overlap, after in calls:
        expected = parse_cron(expr, tz=tz, key=key, dst_gap=gap, dst_overlap=overlap)
        assert cache.next_after(expr, tz, key, gap, overlap, after) == expected.next_after(after)


@settings(max_examples=100, deadline=None)
@given(
    request=REQUESTS,
    steps=st.lists(st.one_of(st.none(), st.integers(-DAY_MS, DAY_MS)), min_size=1, max_size=40),
)
def test_advancing_chains_agree_with_uncached(
    request: tuple[str, str, str, str, str, int], steps: list[int | None]
) -> None:
    """Jobs stepping from their last fire (None) or jumping (an offset) get uncached answers."""
    expr, tz, key, gap, overlap, after = request
    schedule = parse_cron(expr, tz=tz, key=key, dst_gap=gap, dst_overlap=overlap)
    cache = ScheduleCache(window=4)
    last = after
    for step in steps:
        query = last if step is None else last + step
        found = cache.next_after(expr, tz, key, gap, overlap, query)
        assert found == schedule.next_after(query)
        assert found is not None
        last = found


def test_jobs_sharing_an_expression_parse_it_once() -> None:
    """Without H the key does not matter: a thousand jobs make one request and one parse."""
    cache = ScheduleCache()
    for i in range(1000):
        cache.next_after("0 9 * * *", "Europe/Berlin", f"acme/job-{i}", "shift", "first", T0)
    stats = cache.stats()
    assert (stats.parses, stats.evaluations, stats.requests_cached) == (1, 1, 1)


def test_jobs_advancing_together_share_each_computation() -> None:
    """A thousand jobs stepping through the same 16 fires compute each fire time once."""
    cache = ScheduleCache()
    next_run = dict.fromkeys(range(1000), T0)
    for _ in range(16):
        for job, after in next_run.items():
            found = cache.next_after("*/5 * * * *", "UTC", None, "shift", "first", after)
            assert found is not None
            next_run[job] = found
    assert cache.stats().computations == 16


def test_jobs_in_different_phases_still_share() -> None:
    """Jobs registered over an hour on a 30 s schedule, advanced round-robin, share fires."""
    cache = ScheduleCache()
    next_run = [T0 + i * 1_000 for i in range(3600)]
    for _ in range(5):
        for job, after in enumerate(next_run):
            found = cache.next_after("*/30 * * * * *", "UTC", None, "shift", "first", after)
            assert found is not None
            next_run[job] = found
    # 124 distinct fire times; the round-robin order jumps back across the 32-fire window now
    # and then, which restarts it, but every computation still serves at least ten calls.
    assert cache.stats().computations <= 5 * 3600 // 10


def test_h_jobs_resolving_alike_share_an_evaluation() -> None:
    """Different keys whose H fields resolve to the same expression share one evaluation."""
    cache = ScheduleCache()
    for i in range(200):
        cache.next_after("H/30 * * * *", "UTC", f"acme/job-{i}", "shift", "first", T0)
    stats = cache.stats()
    assert stats.parses == 200
    assert stats.evaluations == 30


def test_interval_schedules_share_across_dst_policies() -> None:
    """Interval-style jobs differing only in DST policies share one evaluation."""
    cache = ScheduleCache()
    for gap in ("shift", "skip"):
        for overlap in ("first", "last", "both"):
            cache.next_after("*/10 * * * *", "Europe/Berlin", None, gap, overlap, T0)
    assert cache.stats().evaluations == 1


def test_memory_is_bounded_by_the_lru_limits() -> None:
    """Requests and evaluations never exceed their limits; evicted ones are recomputed."""
    cache = ScheduleCache(max_requests=10, max_evaluations=5)
    for i in range(100):
        cache.next_after(f"{i % 60} 3 * * *", "UTC", None, "shift", "first", T0)
    stats = cache.stats()
    assert stats.requests_cached == 10
    assert stats.evaluations_cached == 5
    assert cache.next_after("0 3 * * *", "UTC", None, "shift", "first", T0) == parse_at(
        "2024-10-27T03:00:00Z"
    )


def test_a_schedule_asked_once_computes_one_fire() -> None:
    """A registration's single question costs one computation, not a whole window."""
    cache = ScheduleCache()
    cache.next_after("0 9 * * *", "UTC", None, "shift", "first", T0)
    assert cache.stats().computations == 1


def test_bad_input_raises_and_is_not_cached() -> None:
    """A bad expression raises ScheduleError each time and leaves nothing behind."""
    cache = ScheduleCache()
    for _ in range(2):
        with pytest.raises(ScheduleError, match="hour field"):
            cache.next_after("0 24 * * *", "UTC", None, "shift", "first", T0)
    assert cache.stats().requests_cached == 0


def test_schedule_accessor_returns_the_parsed_schedule() -> None:
    """cache.schedule() gives the CronSchedule the cache evaluates."""
    schedule = ScheduleCache().schedule("H H * * *", "Europe/Berlin", "acme/x")
    assert schedule.resolved == parse_cron("H H * * *", key="acme/x").resolved


def test_schedule_accessor_names_the_asking_key_when_h_resolves_alike() -> None:
    """Two tenants' jobs whose H minute resolves to the same value share an evaluation, but the
    schedule handed to the second names its own key, not the first's (the preview reports it)."""
    first = parse_cron("H 4 * * *", key="acme/a")
    twin = next(
        f"globex/j{i}"
        for i in range(10_000)
        if parse_cron("H 4 * * *", key=f"globex/j{i}").resolved == first.resolved
    )
    cache = ScheduleCache()
    assert cache.schedule("H 4 * * *", "UTC", "acme/a").key == "acme/a"
    schedule = cache.schedule("H 4 * * *", "UTC", twin)
    assert (schedule.key, schedule.resolved) == (twin, first.resolved)
    assert cache.stats().evaluations == 1  # still one evaluation for both
    assert cache.schedule("0 4 * * *", "UTC", None).key is None


@pytest.mark.parametrize("kwargs", [{"window": 1}, {"max_requests": 0}, {"max_evaluations": 0}])
def test_limits_must_be_positive(kwargs: dict[str, int]) -> None:
    """Cache sizes below 1 and windows below 2 fire times are rejected."""
    with pytest.raises(ValueError, match=">= 1"):
        ScheduleCache(**kwargs)
