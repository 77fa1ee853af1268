"""A cron job's active window on the real stack (issue 50): a running scheduler claims exactly
the occurrences inside [start_at, end_at] and then completes the job, or deletes it with
`after_end: delete` (its tenant's job count moving with it); a leader that takes over after a
predecessor claimed the last occurrence without writing where the job stands finishes it from
the runs.
"""

from __future__ import annotations

import asyncpg
import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.schedule import ScheduleCache
from tickwheel.sharding import shard_of
from tickwheel.shards import store
from tickwheel.shards.plan import plan_claims

from .conftest import TEST_SHARDS, SchedEnv, running_scheduler, wait_for

pytestmark = pytest.mark.integration


async def _status(sched: SchedEnv, job_id: str) -> str:
    (row,) = await sched.fetch(
        "SELECT status FROM jobs WHERE tenant = $1 AND job_id = $2", sched.tenant, job_id
    )
    return str(row["status"])


async def _usage(sched: SchedEnv) -> int:
    (row,) = await sched.fetch("SELECT jobs FROM tenant_usage WHERE tenant = $1", sched.tenant)
    return int(row["jobs"])


def _window(lead_s: int, seconds: int) -> tuple[int, int]:
    """A window of `seconds` + 1 whole seconds opening `lead_s` s from now."""
    start = (now_ms() // 1000 + lead_s) * 1000
    return start, start + seconds * 1000


@pytest.mark.parametrize(("after_end", "final"), [(None, "completed"), ("delete", "deleted")])
async def test_a_running_scheduler_claims_the_window_and_then_ends_the_job(
    sched: SchedEnv, after_end: str | None, final: str
) -> None:
    """an every-second job with a 3-second window: runs at exactly its four seconds (both
    bounds inclusive), none before or after, then the job completes or is deleted"""
    start, end = _window(3, 3)
    doc = {"id": "win", "schedule": "* * * * * *", "handler": "demo.echo",
           "start_at": format_ms(start), "end_at": format_ms(end)}  # fmt: skip
    if after_end is not None:
        doc["after_end"] = after_end
    await sched.register(doc, {"id": "other", "schedule": "0 0 1 1 *", "handler": "demo.echo"})
    assert await _usage(sched) == 2
    async with running_scheduler(sched, "a"):

        async def ended() -> bool:
            return await _status(sched, "win") == final

        await wait_for(ended, 30, what=f"the job {final} after its window")
        # A second more of ticks past the end claims nothing further.
        await wait_for(lambda: now_ms() > end + 1500, 5)
    runs = await sched.runs("win")
    assert [r["ms"] for r in runs] == [start, start + 1000, start + 2000, end]
    assert all(r["skip_reason"] is None for r in runs)
    assert await _usage(sched) == (1 if final == "deleted" else 2)
    assert await _status(sched, "other") == "active"


async def test_a_leader_that_took_over_after_the_last_claim_deletes_the_job(
    sched: SchedEnv,
) -> None:
    """a predecessor claimed the window's last occurrence and went before it wrote the job's
    position: the next leader's load finds the claim in the runs, sees no occurrence left, and
    deletes the job (after_end 'delete') without claiming anything again"""
    start, end = _window(1, 1)
    await sched.register(
        {"id": "last", "schedule": "* * * * * *", "handler": "demo.echo",
         "start_at": format_ms(start), "end_at": format_ms(end), "after_end": "delete"}
    )  # fmt: skip
    conn = await asyncpg.connect(sched.dsn)
    try:
        shard = shard_of(sched.tenant, "last", TEST_SHARDS)
        lease = await store.take_over(conn, shard, "gone")
        loaded, _ = await store.horizon(conn, shard, now_ms() + 60_000)
        ((entry, _),) = [(e, c) for e, c in loaded if e.key.endswith("/last")]
        assert entry.next_ms == start
        cache = ScheduleCache()
        for at in (start, end):  # both occurrences claimed; no position written
            await conn.execute(
                "SELECT pg_sleep(greatest(0, ($1::bigint - $2::bigint) / 1000.0))", at, now_ms()
            )
            entry.next_ms = at
            assert (await store.claim(conn, lease, 30_000, plan_claims([entry], at, cache))).runs
    finally:
        await conn.close()
    assert await _status(sched, "last") == "active"  # the row still says so
    async with running_scheduler(sched, "b"):

        async def deleted() -> bool:
            return await _status(sched, "last") == "deleted"

        await wait_for(deleted, 30, what="the job deleted by the next leader")
    assert [r["ms"] for r in await sched.runs("last")] == [start, end]
    assert await _usage(sched) == 0
