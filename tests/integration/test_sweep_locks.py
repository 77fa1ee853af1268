"""The sweeps never wait for a run another transaction holds (a worker's claim or result write
in flight): they skip it and find it at the next sweep if it still needs them. Waiting let a
sweep, which locks many runs in its scan's order, and a worker's batch, which locks its runs
in its deliveries' order, each hold a row the other wanted: deadlocks, logged and retried in
`sweep_republish` and in workers' claims (docs/RELIABILITY.md, session 15)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tickwheel.registry_api.store import RegistryStore
from tickwheel.shards import store

from .conftest import upsert_op

pytestmark = pytest.mark.integration

SHARDS = 4
SHARD = 0  # the runs' shard (the sweeps read job_runs.shard_id; the job's row is joined by key)
NOT_WAITING_S = 5.0  # a sweep that waited for the held rows would still be waiting then
LEASE_MS = 60_000

# job id: (status, attempt, max_attempts) of its one run, every lease lapsed
RUNS = {
    "republish": ("published", 1, 5),
    "republish-held": ("published", 1, 5),
    "requeue": ("running", 1, 5),
    "requeue-held": ("running", 1, 5),
    "dead": ("running", 5, 5),
    "dead-held": ("running", 5, 5),
}


def _every_five_minutes(job_id: str) -> dict[str, str]:
    return {"id": job_id, "schedule": "*/5 * * * *", "handler": "h.run"}


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    made = await asyncpg.create_pool(db_dsn, min_size=1, max_size=3)
    yield made
    await made.close()


async def test_the_sweeps_skip_runs_another_transaction_holds(
    db_dsn: str, pool: asyncpg.Pool
) -> None:
    """lapsed runs of every sweep's kind, one of each held FOR UPDATE by another transaction:
    each sweep returns at once with the runs not held; once the holder has gone, the next
    sweep takes the rest"""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    registry = RegistryStore(pool, SHARDS)
    await registry.create_tenant(tenant)
    await registry.apply(
        [upsert_op(tenant, _every_five_minutes(job_id), SHARDS) for job_id in RUNS]
    )
    for job_id, (status, attempt, max_attempts) in RUNS.items():
        await pool.execute(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " attempt, max_attempts, epoch, lease_until, worker, started_at)"
            " VALUES ($1, $2, date_trunc('second', now()), $3, 'normal', $4, $5, $6, 1,"
            " now() - interval '1 minute', CASE WHEN $4 = 'running' THEN 'w' END,"
            " CASE WHEN $4 = 'running' THEN now() END)",
            tenant,
            job_id,
            SHARD,
            status,
            attempt,
            max_attempts,
        )
    async with pool.acquire() as conn:
        lease = await store.take_over(conn, SHARD, "sweeper")
    holder = await asyncpg.connect(db_dsn)
    try:
        holding = holder.transaction()
        await holding.start()
        held = await holder.fetch(
            "SELECT job_id FROM job_runs WHERE tenant = $1 AND job_id LIKE '%-held' FOR UPDATE",
            tenant,
        )
        assert len(held) == 3

        async def sweep() -> tuple[set[str], set[str], set[str]]:
            async with pool.acquire() as conn, store.fenced(conn, lease):
                again = await store.sweep_republish(conn, lease, LEASE_MS)
                requeued = await store.sweep_requeue_running(conn, lease, LEASE_MS)
                dead = await store.sweep_dead_running(conn, lease)
            return (
                {d.job_id for d in again},
                {d.job_id for d in requeued},
                {d.run.job_id for d in dead},
            )

        first = await asyncio.wait_for(sweep(), NOT_WAITING_S)
        assert first == ({"republish"}, {"requeue"}, {"dead"})
        await holding.rollback()
        second = await asyncio.wait_for(sweep(), NOT_WAITING_S)
        assert second == ({"republish-held"}, {"requeue-held"}, {"dead-held"})
    finally:
        await holder.close()
    rows = {
        r["job_id"]: (r["status"], r["attempt"], r["epoch"])
        for r in await pool.fetch(
            "SELECT job_id, status, attempt, epoch FROM job_runs WHERE tenant = $1", tenant
        )
    }
    for job_id in ("republish", "republish-held"):
        assert rows[job_id] == ("published", 1, lease.epoch)
    for job_id in ("requeue", "requeue-held"):
        assert rows[job_id] == ("pending", 2, lease.epoch)
    for job_id in ("dead", "dead-held"):
        assert rows[job_id][:2] == ("dead", 5)


async def test_a_takeover_adopts_around_a_held_run_and_again_once_it_is_free(
    db_dsn: str, pool: asyncpg.Pool
) -> None:
    """an earlier epoch's dispatched pending runs, one held by a worker's claim in flight: the
    new leader's adoption returns at once with the others and says one is left; once the
    claim has gone without taking the run, the next adoption takes it and none is left"""
    shard = 1
    tenant = f"t{uuid.uuid4().hex[:10]}"
    registry = RegistryStore(pool, SHARDS)
    await registry.create_tenant(tenant)
    jobs = ["free-1", "free-2", "held"]
    await registry.apply(
        [upsert_op(tenant, _every_five_minutes(job_id), SHARDS) for job_id in jobs]
    )
    for job_id in jobs:
        await pool.execute(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " attempt, epoch, lease_until)"
            " VALUES ($1, $2, date_trunc('second', now()), $3, 'normal', 'pending', 1, 0,"
            " now() + interval '5 minutes')",
            tenant,
            job_id,
            shard,
        )
    async with pool.acquire() as conn:
        lease = await store.take_over(conn, shard, "adopter")
    assert lease.epoch != 0
    holder = await asyncpg.connect(db_dsn)
    try:
        claiming = holder.transaction()
        await claiming.start()
        await holder.execute(
            "SELECT 1 FROM job_runs WHERE tenant = $1 AND job_id = 'held' FOR UPDATE", tenant
        )

        async def adopt() -> tuple[set[str], bool]:
            async with pool.acquire() as conn, store.fenced(conn, lease):
                adopted = await store.adopt(conn, lease, LEASE_MS)
                return {d.job_id for d in adopted}, await store.has_unadopted(conn, lease)

        assert await asyncio.wait_for(adopt(), NOT_WAITING_S) == ({"free-1", "free-2"}, True)
        await claiming.rollback()  # the claim failed: the run is still the old epoch's
        assert await asyncio.wait_for(adopt(), NOT_WAITING_S) == ({"held"}, False)
    finally:
        await holder.close()
    epochs = await pool.fetch(
        "SELECT DISTINCT epoch FROM job_runs WHERE tenant = $1 AND status = 'pending'", tenant
    )
    assert [r["epoch"] for r in epochs] == [lease.epoch]
