"""The process runner: a part that dies takes its process down (I9), a stop ends all parts."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tickwheel.runtime import EXIT_OK, EXIT_PART_DIED, Process, awaiting

pytestmark = pytest.mark.unit


async def test_part_raising_stops_process_with_nonzero_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A part that raises is logged with its traceback and the others are stopped; exit 1."""
    proc = Process("p")
    stopped: list[str] = []

    async def healthy() -> None:
        await proc.stop.wait()
        stopped.append("healthy")

    async def dying() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("boom")

    proc.spawn("healthy", healthy())
    proc.spawn("dying", dying())
    with caplog.at_level(logging.CRITICAL, "tickwheel.runtime"):
        code = await asyncio.wait_for(proc.run(signals=False), 5)
    assert code == EXIT_PART_DIED
    assert stopped == ["healthy"]
    assert not proc.healthy and proc.health["dying"].error == "RuntimeError: boom"
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)


async def test_part_returning_early_is_a_death() -> None:
    """A part that returns while the process runs counts as dead, never silently gone."""
    proc = Process("p")

    async def quits() -> None:
        return None

    proc.spawn("quits", quits())
    assert await asyncio.wait_for(proc.run(signals=False), 5) == EXIT_PART_DIED
    assert proc.health["quits"].error == "returned while the process was running"


async def test_requested_stop_is_clean_and_closers_run_newest_first() -> None:
    """A requested stop ends every part, runs closers in reverse order, and exits 0."""
    proc = Process("p")
    closed: list[int] = []

    async def part() -> None:
        await proc.stop.wait()

    async def close(n: int) -> None:
        closed.append(n)

    proc.spawn("a", part())
    proc.on_close(lambda: close(1))
    proc.on_close(lambda: close(2))
    asyncio.get_running_loop().call_later(0.01, proc.request_stop)
    assert await asyncio.wait_for(proc.run(signals=False), 5) == EXIT_OK
    assert closed == [2, 1] and proc.healthy is False  # parts ended: none alive any more


async def test_part_ignoring_stop_is_cancelled_after_grace() -> None:
    """A part that does not stop within the grace period is cancelled; the stop still ends."""
    proc = Process("p")

    async def stubborn() -> None:
        await asyncio.sleep(3600)

    proc.spawn("stubborn", stubborn())
    proc.request_stop()
    assert await asyncio.wait_for(proc.run(signals=False, grace_s=0.05), 5) == EXIT_OK


async def test_awaiting_names_every_coroutine_down_the_chain() -> None:
    """A hung task's log line says where it waits, not only its outermost frame."""
    never = asyncio.Event()

    async def innermost() -> None:
        await never.wait()

    async def middle() -> None:
        await innermost()

    task = asyncio.create_task(middle())
    await asyncio.sleep(0)
    where = awaiting(task).splitlines()
    assert [line.rsplit(" in ", 1)[-1] for line in where[:3]] == ["middle", "innermost", "wait"]
    assert where[0].startswith(f"  {__file__}:")
    assert where[-1].startswith("  awaiting a ")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
