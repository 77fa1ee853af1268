"""Limited runs on the real stack (issue 50, migration 0020): a job with `max_runs` N completes
after N scheduled runs, also when a leader that claimed some of them went before it wrote its
count; a job raised to more runs goes on; a deleted job registered again counts from zero.
"""

from __future__ import annotations

import itertools

import asyncpg
import pytest

from tickwheel.clock import now_ms
from tickwheel.schedule import ScheduleCache
from tickwheel.sharding import shard_of
from tickwheel.shards import store
from tickwheel.shards.plan import plan_claims

from .conftest import TEST_SHARDS, SchedEnv, running_scheduler, wait_for

pytestmark = pytest.mark.integration

EVERY_SECOND = {"schedule": "* * * * * *", "handler": "demo.echo"}


async def _status(sched: SchedEnv, job_id: str) -> str:
    (row,) = await sched.fetch(
        "SELECT status FROM jobs WHERE tenant = $1 AND job_id = $2", sched.tenant, job_id
    )
    return str(row["status"])


async def _counted(sched: SchedEnv, job_id: str) -> list[int]:
    """The job's scheduled runs that count (not skipped), as instants."""
    return [r["ms"] for r in await sched.runs(job_id) if r["status"] != "skipped"]


async def _completed(sched: SchedEnv, job_id: str) -> None:
    async def done() -> bool:
        return await _status(sched, job_id) == "completed"

    await wait_for(done, 30, what=f"{job_id} completed")


async def test_a_job_completes_after_max_runs_and_more_runs_resume_it(sched: SchedEnv) -> None:
    """an every-second job with max_runs 3 runs exactly three times, one a second, and
    completes; raised to 5 it runs twice more and completes again"""
    await sched.register({"id": "three", **EVERY_SECOND, "max_runs": 3})
    async with running_scheduler(sched, "a"):
        await _completed(sched, "three")
        first = await _counted(sched, "three")
        assert len(first) == 3 and first == sorted(first)
        assert [b - a for a, b in itertools.pairwise(first)] == [1000, 1000]
        await sched.register({"id": "three", **EVERY_SECOND, "max_runs": 5})
        await wait_for(
            lambda: _counted_len(sched, "three", 5), 30, what="two more runs after the raise"
        )
        await _completed(sched, "three")
    assert len(await _counted(sched, "three")) == 5


async def _counted_len(sched: SchedEnv, job_id: str, n: int) -> bool:
    return len(await _counted(sched, job_id)) >= n


async def test_a_leader_after_one_that_claimed_without_writing_its_count_stops_at_n(
    sched: SchedEnv,
) -> None:
    """a predecessor claimed two of three runs and went before it wrote the count or the
    position: the next leader derives the two from the runs, claims one more, completes it"""
    await sched.register({"id": "limited", **EVERY_SECOND, "max_runs": 3})
    conn = await asyncpg.connect(sched.dsn)
    try:
        shard = shard_of(sched.tenant, "limited", TEST_SHARDS)
        lease = await store.take_over(conn, shard, "gone")
        loaded, _ = await store.horizon(conn, shard, now_ms() + 60_000)
        ((entry, _),) = [(e, c) for e, c in loaded if e.key.endswith("/limited")]
        first = entry.next_ms
        cache = ScheduleCache()
        for at in (entry.next_ms, entry.next_ms + 1000):
            await conn.execute(
                "SELECT pg_sleep(greatest(0, ($1::bigint - $2::bigint) / 1000.0))", at, now_ms()
            )
            entry.next_ms = at
            done = await store.run_counts(conn, [entry])
            batch = plan_claims([entry], at, cache, None, done)
            assert (await store.claim(conn, lease, 30_000, batch)).runs
    finally:
        await conn.close()
    (row,) = await sched.fetch(
        "SELECT runs_done, counted_through FROM jobs WHERE tenant = $1 AND job_id = 'limited'",
        sched.tenant,
    )
    # Nothing written by the leader: the count starts at the first occurrence, as registered.
    assert row["runs_done"] == 0
    assert int(row["counted_through"].timestamp() * 1000) == first
    async with running_scheduler(sched, "b"):
        await _completed(sched, "limited")
    assert len(await _counted(sched, "limited")) == 3


async def test_a_deleted_job_registered_again_counts_from_zero(sched: SchedEnv) -> None:
    """max_runs 2, run to completion, deleted, registered again: two more runs"""
    await sched.register({"id": "again", **EVERY_SECOND, "max_runs": 2})
    async with running_scheduler(sched, "a"):
        await _completed(sched, "again")
        await sched.op("delete", "again")
        await sched.register({"id": "again", **EVERY_SECOND, "max_runs": 2})
        await wait_for(
            lambda: _counted_len(sched, "again", 4), 30, what="two runs after re-creation"
        )
        await _completed(sched, "again")
    assert len(await _counted(sched, "again")) == 4


async def test_a_job_given_max_runs_later_counts_from_then(sched: SchedEnv) -> None:
    """a job that ran for a while without a limit, then given max_runs 2: two more runs, not
    none (its earlier runs are not the limit's)"""
    await sched.register({"id": "later", **EVERY_SECOND})
    async with running_scheduler(sched, "a"):
        await wait_for(lambda: _counted_len(sched, "later", 3), 30, what="three runs")
        await sched.register({"id": "later", **EVERY_SECOND, "max_runs": 2})
        before = len(await _counted(sched, "later"))
        await _completed(sched, "later")
    after = await _counted(sched, "later")
    # The runs already claimed when the limit arrived (at most the one under way) aside, the
    # limit gave exactly two.
    assert before + 2 <= len(after) <= before + 3, (before, len(after))
