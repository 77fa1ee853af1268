"""The claim reads the job and does not write it (I3, D-269): a claim finds a job only at the
version its wheel knew and inserts the run rows; a repeated claim of an instant is a no-op that
still finds the job; the job's position is written later, in batches, forward only and over
the version the claim saw; a leader that loads the horizon after another claimed without
writing the position goes on from the runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tickwheel import broken
from tickwheel.clock import format_ms, now_ms
from tickwheel.schedule import ScheduleCache
from tickwheel.sharding import shard_of
from tickwheel.shards import store
from tickwheel.shards.plan import JobEntry, plan_claims
from tickwheel.shards.positions import Positions

from .conftest import TEST_SHARDS, SchedEnv

pytestmark = pytest.mark.integration


@pytest.fixture
async def conn(sched: SchedEnv) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(sched.dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def _loaded(
    conn: asyncpg.Connection, sched: SchedEnv, job_id: str
) -> tuple[store.Lease, JobEntry, int | None]:
    """The job's shard taken over by `a`, and the job as its horizon load finds it."""
    shard = shard_of(sched.tenant, job_id, TEST_SHARDS)
    lease = await store.take_over(conn, shard, "a")
    loaded, _ = await store.horizon(conn, shard, now_ms() + 60_000)
    (mine,) = [(e, c) for e, c in loaded if e.key.endswith(f"/{job_id}")]
    return lease, mine[0], mine[1]


async def _job(sched: SchedEnv, job_id: str) -> asyncpg.Record:
    (row,) = await sched.fetch(
        "SELECT status, version, (extract(epoch FROM next_run_at) * 1000)::bigint AS next_ms,"
        " xmin::text AS xmin FROM jobs WHERE tenant = $1 AND job_id = $2",
        sched.tenant,
        job_id,
    )
    return row


async def test_a_claim_inserts_the_run_and_leaves_the_jobs_row_as_it_was(
    sched: SchedEnv, conn: asyncpg.Connection
) -> None:
    """a claim of a due one-off inserts its run and does not touch the job's row (same
    tuple: no new row version); the position written afterwards completes it"""
    at = now_ms() - 1000
    await sched.register({"id": "once", "at": format_ms(at), "handler": "demo.echo"})
    lease, entry, claimed_through = await _loaded(conn, sched, "once")
    assert claimed_through is None
    before = await _job(sched, "once")
    batch = plan_claims([entry], now_ms(), ScheduleCache())
    claimed = await store.claim(conn, lease, 30_000, batch)
    assert claimed.jobs == {(sched.tenant, "once")}
    assert [r.scheduled_ms for r in claimed.runs] == [at]
    assert await _job(sched, "once") == before  # not written: the same row version
    pool = await asyncpg.create_pool(sched.dsn, min_size=1)
    try:
        positions = Positions(pool)
        positions.claimed([(sched.tenant, "once", entry.version, None)], 0)
        await positions.flush_all()
    finally:
        await pool.close()
    after = await _job(sched, "once")
    assert after["status"] == "completed" and after["next_ms"] is None
    assert after["version"] == before["version"]  # not a registry change: no feed entry


async def test_a_claim_at_a_version_the_job_no_longer_has_finds_nothing(
    sched: SchedEnv, conn: asyncpg.Connection
) -> None:
    """edited after the wheel loaded it (a new version, same instant): the claim finds no job
    and inserts no run; the leader re-reads the job (the caller's part)"""
    at = now_ms() - 1000
    await sched.register({"id": "edited", "at": format_ms(at), "handler": "demo.echo"})
    lease, entry, _ = await _loaded(conn, sched, "edited")
    await sched.register({"id": "edited", "at": format_ms(at), "handler": "demo.echo",
                          "payload": {"v": 2}})  # fmt: skip
    assert (await _job(sched, "edited"))["version"] > entry.version
    claimed = await store.claim(
        conn, lease, 30_000, plan_claims([entry], now_ms(), ScheduleCache())
    )
    assert claimed.jobs == set() and claimed.runs == []
    assert await sched.runs("edited") == []


async def test_the_broken_build_claim_ignores_version_claims_an_edited_jobs_stale_entry(
    sched: SchedEnv, conn: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same edit under the broken build `claim_ignores_version` (tickwheel/broken.py): the
    stale entry is claimed and a run inserted, which the test above forbids (I3)."""
    monkeypatch.setattr(broken, "_ARMED", frozenset({broken.CLAIM_IGNORES_VERSION}))
    at = now_ms() - 1000
    await sched.register({"id": "edited", "at": format_ms(at), "handler": "demo.echo"})
    lease, entry, _ = await _loaded(conn, sched, "edited")
    await sched.register({"id": "edited", "at": format_ms(at), "handler": "demo.echo",
                          "payload": {"v": 2}})  # fmt: skip
    claimed = await store.claim(
        conn, lease, 30_000, plan_claims([entry], now_ms(), ScheduleCache())
    )
    assert claimed.jobs == {(sched.tenant, "edited")}
    assert len(await sched.runs("edited")) == 1


async def test_a_repeated_claim_of_an_instant_finds_the_job_and_inserts_nothing(
    sched: SchedEnv, conn: asyncpg.Connection
) -> None:
    """the same claim twice (a takeover that re-loads a position not written yet): the second
    finds the job — the leader moves on — and publishes nothing"""
    at = now_ms() - 1000
    await sched.register({"id": "twice", "at": format_ms(at), "handler": "demo.echo"})
    lease, entry, _ = await _loaded(conn, sched, "twice")
    batch = plan_claims([entry], now_ms(), ScheduleCache())
    first = await store.claim(conn, lease, 30_000, batch)
    second = await store.claim(conn, lease, 30_000, batch)
    assert len(first.runs) == 1
    assert second.jobs == {(sched.tenant, "twice")} and second.runs == []
    assert len(await sched.runs("twice")) == 1


async def test_positions_move_forward_only_and_never_over_a_registry_change(
    sched: SchedEnv, conn: asyncpg.Connection
) -> None:
    """a position behind the row's is not written; one over a version the registry has
    replaced is not either: the registry's row stands"""
    await sched.register({"id": "cron", "schedule": "* * * * * *", "handler": "demo.echo"})
    row = await _job(sched, "cron")
    pool = await asyncpg.create_pool(sched.dsn, min_size=1)
    try:
        positions = Positions(pool)
        positions.claimed([(sched.tenant, "cron", row["version"], row["next_ms"] - 5000)], 0)
        await positions.flush_all()
        assert (await _job(sched, "cron"))["next_ms"] == row["next_ms"]
        positions.claimed([(sched.tenant, "cron", row["version"], row["next_ms"] + 3000)], 0)
        await positions.flush_all()
        assert (await _job(sched, "cron"))["next_ms"] == row["next_ms"] + 3000
        await sched.register({"id": "cron", "schedule": "*/2 * * * * *", "handler": "demo.echo"})
        edited = await _job(sched, "cron")
        positions.claimed([(sched.tenant, "cron", row["version"], edited["next_ms"] + 60_000)], 0)
        await positions.flush_all()
        assert await _job(sched, "cron") == edited
    finally:
        await pool.close()


async def test_a_load_goes_on_from_the_occurrences_a_predecessor_claimed(
    sched: SchedEnv, conn: asyncpg.Connection
) -> None:
    """a predecessor claimed three occurrences of an every-second job and died before it
    wrote the position: the horizon load names the latest of them, from which the next leader
    goes on (instead of claiming them again or judging them missed)"""
    await sched.register({"id": "tick", "schedule": "* * * * * *", "handler": "demo.echo"})
    lease, entry, claimed_through = await _loaded(conn, sched, "tick")
    assert claimed_through is None
    cache = ScheduleCache()
    instants = [entry.next_ms, entry.next_ms + 1000, entry.next_ms + 2000]
    for at in instants:  # three claims, each of the entry's next occurrence; no position written
        entry.next_ms = at
        batch = plan_claims([entry], at, cache)
        assert (await store.claim(conn, lease, 30_000, batch)).runs
    assert [r["ms"] for r in await sched.runs("tick")] == instants
    assert (await _job(sched, "tick"))["next_ms"] == instants[0]  # the row still says so
    # Once those instants are past, a new leader's load finds the latest one claimed.
    await conn.execute("SELECT pg_sleep(greatest(0, ($1::bigint - $2::bigint) / 1000.0))",
                       instants[-1] + 100, now_ms())  # fmt: skip
    _, _, claimed_through = await _loaded(conn, sched, "tick")
    assert claimed_through == instants[-1]
