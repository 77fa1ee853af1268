"""The dispatch window's accounting (shards/window.py), without I/O."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tickwheel.shards.window import DispatchWindow

pytestmark = pytest.mark.unit


def test_reserved_entries_take_room_at_once_and_settle_to_the_runs_claimed() -> None:
    """A take reserves before the claim's first await; its settlement frees what was stale or
    skipped and charges a catch-up's extra runs."""
    window = DispatchWindow(100, 0.1, 4)
    window.reserve(["a"] * 60)
    assert window.room("a") == 40 and window.room("b") == 100
    window.settle(["a"] * 60, ["a"] * 50)  # ten entries were stale
    assert window.room("a") == 50
    window.reserve(["a"] * 10)
    window.settle(["a"] * 10, ["a"] * 13)  # a run_all catch-up: three more runs
    assert window.room("a") == 37
    window.reserve(["a"] * 5)
    window.settle(["a"] * 5, [])  # the claim failed
    assert window.room("a") == 37


def test_a_tenant_is_watched_from_half_its_window_and_a_count_replaces_its_tally() -> None:
    """Below half the window nothing is counted; from half on the count of unstarted runs,
    plus what claims committed since the count began, plus claims still in flight, is what
    the tenant uses."""
    window = DispatchWindow(100, 0.1, 4)
    window.reserve(["a"] * 49)
    window.settle(["a"] * 49, ["a"] * 49)
    assert window.watched() == []
    window.reserve(["a"] * 30)  # a claim in flight across the count below
    assert window.watched() == ["a"]
    assert window.begin_count() == ["a"]  # a count begins (`run`)
    window.reserve(["a"] * 7)
    window.settle(["a"] * 7, ["a"] * 7)  # committed while it runs
    window.apply({"a": 20}, ["a"])
    assert window.room("a") == 100 - (20 + 7 + 30)
    window.settle(["a"] * 30, ["a"] * 30)  # the claim in flight commits: now counted as runs
    assert window.room("a") == 100 - (20 + 7 + 30)
    window.begin_count()
    window.apply({"a": 10}, ["a"])
    assert window.room("a") == 90 and window.watched() == []  # 10 < 50: no more counting
    window.begin_count()
    window.apply({}, ["a"])  # nothing unstarted: the tenant leaves the tally
    assert window.room("a") == 100


def test_a_count_that_frees_room_wakes_the_leaders_waiting_for_it() -> None:
    """A leader holding entries is woken by the count that frees room, not by one that does
    not."""
    window = DispatchWindow(10, 0.1, 4)
    window.reserve(["a"] * 10)
    window.settle(["a"] * 10, ["a"] * 10)
    wake = asyncio.Event()
    window.wait_for_room(wake)
    window.begin_count()
    window.apply({"a": 10}, ["a"])
    assert not wake.is_set()
    window.begin_count()
    window.apply({"a": 4}, ["a"])
    assert wake.is_set() and window.room("a") == 6


def test_no_limit_bounds_nothing() -> None:
    """0 turns the window off: every tenant always has room, nothing is tallied."""
    window = DispatchWindow(0, 0.1, 4)
    window.reserve(["a"] * 1_000_000)
    assert window.room("a") > 1_000_000 and window.watched() == []


def test_one_claim_takes_at_most_a_quarter_of_a_tenants_window() -> None:
    """A claim's share of a tenant is its room, and no more than a quarter of the window."""
    window = DispatchWindow(100, 0.1, 4)
    assert window.share("a") == 25
    window.reserve(["a"] * 80)
    assert window.share("a") == 20
    window.reserve(["a"] * 20)
    assert window.share("a") == 0


def test_a_count_wakes_as_many_leaders_as_the_room_it_freed_can_feed() -> None:
    """Room for two shares wakes the first three leaders that waited, not all ten."""
    window = DispatchWindow(100, 0.1, 4)
    window.reserve(["a"] * 100)
    window.settle(["a"] * 100, ["a"] * 100)
    wakes = [asyncio.Event() for _ in range(10)]
    for wake in wakes:
        window.wait_for_room(wake)
    window.begin_count()
    window.apply({"a": 50}, ["a"])  # 50 freed: two shares of 25
    assert [w.is_set() for w in wakes] == [True] * 3 + [False] * 7
    window.begin_count()
    window.apply({}, ["a"])  # nothing unstarted: nobody is near the window, everyone may go
    assert all(w.is_set() for w in wakes)


class _Conn:
    """A connection that answers the count with what the database holds when it is asked."""

    def __init__(self, unstarted: dict[str, int]) -> None:
        self.unstarted = unstarted

    async def fetch(
        self, _sql: str, tenants: list[str], _shards: list[int]
    ) -> list[dict[str, object]]:
        return [{"tenant": t, "unstarted": n} for t, n in self.unstarted.items() if t in tenants]


class _SlowPool:
    """A pool whose connection comes only after `release` is set (other leaders hold them)."""

    def __init__(self, conn: _Conn) -> None:
        self.conn = conn
        self.release = asyncio.Event()

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[_Conn]:
        await self.release.wait()
        yield self.conn


def test_claims_committed_while_the_count_waits_for_a_connection_are_not_counted_twice() -> None:
    """The count begins once it holds a connection: 900 runs claimed (and so in the database)
    while it waited are in its answer, not in its answer and again in what was claimed since."""

    async def go() -> None:
        window = DispatchWindow(2000, 0.1, 4)
        window.reserve(["a"] * 1000)
        window.settle(["a"] * 1000, ["a"] * 1000)  # watched: half the window
        conn = _Conn({"a": 1000})
        pool = _SlowPool(conn)
        counting = asyncio.ensure_future(window._count(pool))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        window.reserve(["a"] * 900)
        window.settle(["a"] * 900, ["a"] * 900)  # committed while the count waits
        conn.unstarted["a"] = 1900
        pool.release.set()
        await counting
        assert window.room("a") == 2000 - 1900

    asyncio.run(go())
