"""The leader's claim fences itself (I2): one statement that share-locks the shard's row and
writes nothing unless the row still holds the claiming lease's epoch and owner — whether the
takeover committed before the claim began or while the claim waited for the row's lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import asyncpg
import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.schedule import ScheduleCache
from tickwheel.sharding import shard_of
from tickwheel.shards import store
from tickwheel.shards.plan import ClaimBatch, plan_claims

from .conftest import TEST_SHARDS, SchedEnv

pytestmark = pytest.mark.integration

JOB = "fenced-one-off"
T = TypeVar("T")


@pytest.fixture
async def sessions(sched: SchedEnv) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Connection]]:
    """Two sessions of the deployment's database: the claiming leader's and another."""
    conn = await asyncpg.connect(sched.dsn)
    other = await asyncpg.connect(sched.dsn)
    try:
        yield conn, other
    finally:
        await other.close()
        await conn.close()


async def _lease_and_batch(
    sched: SchedEnv, conn: asyncpg.Connection
) -> tuple[store.Lease, ClaimBatch]:
    """A one-off due now, its shard led by `a`, and the claim `a` would make of it."""
    at = now_ms() - 1000
    await sched.register({"id": JOB, "at": format_ms(at), "handler": "demo.echo"})
    shard = shard_of(sched.tenant, JOB, TEST_SHARDS)
    lease = await store.take_over(conn, shard, "a")
    loaded, _ = await store.horizon(conn, shard, now_ms() + 60_000)
    entries = [entry for entry, _ in loaded]
    mine = [e for e in entries if e.key.endswith(JOB)]
    assert len(mine) == 1
    return lease, plan_claims(mine, now_ms(), ScheduleCache())


async def _waiting(call: Coroutine[Any, Any, T], what: str) -> asyncio.Future[T]:
    """`call` started and, half a second on, still waiting for a lock."""
    started = asyncio.ensure_future(call)
    await asyncio.sleep(0.5)
    assert not started.done(), f"{what} did not wait for the shard's row"
    return started


async def _untouched(sched: SchedEnv) -> None:
    assert await sched.runs() == []
    (job,) = await sched.fetch(
        "SELECT status FROM jobs WHERE tenant = $1 AND job_id = $2", sched.tenant, JOB
    )
    assert job["status"] == "active"  # a claimed one-off would be completed


async def test_a_claim_after_a_takeover_writes_nothing_and_raises_fenced_out(
    sched: SchedEnv, sessions: tuple[asyncpg.Connection, asyncpg.Connection]
) -> None:
    """`a` claims after `b` took the shard over: FencedOut naming b's epoch, no run row, the
    job not advanced; `b`'s claim of the same entry then commits under its own epoch"""
    conn, _ = sessions
    lease, batch = await _lease_and_batch(sched, conn)
    successor = await store.take_over(conn, lease.shard, "b")
    with pytest.raises(store.FencedOut, match=f"now \\({successor.epoch}, 'b'\\)"):
        await store.claim(conn, lease, 30_000, batch)
    await _untouched(sched)
    claimed = await store.claim(conn, successor, 30_000, batch)
    assert [r.job_id for r in claimed.runs] == [JOB]
    (run,) = await sched.runs()
    assert (run["status"], run["epoch"]) == ("pending", successor.epoch)


@pytest.mark.parametrize("takeover_ends", ["commit", "rollback"])
async def test_a_claim_waiting_for_a_takeover_in_flight_follows_its_outcome(
    sched: SchedEnv,
    sessions: tuple[asyncpg.Connection, asyncpg.Connection],
    takeover_ends: str,
) -> None:
    """a takeover holds the shard's row, uncommitted: `a`'s claim waits for it. If the takeover
    commits, the claim re-reads the row, finds another epoch and writes nothing; if it rolls
    back, the row still holds `a`, whose claim commits"""
    conn, other = sessions
    lease, batch = await _lease_and_batch(sched, conn)
    takeover = other.transaction()
    await takeover.start()
    await other.execute(
        "UPDATE shard_leaders SET epoch = epoch + 1, owner = 'b' WHERE shard_id = $1",
        lease.shard,
    )
    claim = await _waiting(store.claim(conn, lease, 30_000, batch), "the claim")
    if takeover_ends == "commit":
        await takeover.commit()
        with pytest.raises(store.FencedOut):
            await claim
        await _untouched(sched)
    else:
        await takeover.rollback()
        claimed = await claim
        assert [r.job_id for r in claimed.runs] == [JOB]
        (run,) = await sched.runs()
        assert run["epoch"] == lease.epoch


async def test_a_takeover_waits_for_a_claim_in_a_transaction_and_adopts_its_runs(
    sched: SchedEnv, sessions: tuple[asyncpg.Connection, asyncpg.Connection]
) -> None:
    """the claim holds the shard's row until its commit: a takeover started meanwhile waits,
    and its epoch comes after the run the claim created (which it adopts as stale)"""
    conn, other = sessions
    lease, batch = await _lease_and_batch(sched, conn)
    tx = conn.transaction()
    await tx.start()
    await store.claim(conn, lease, 30_000, batch)
    takeover = await _waiting(store.take_over(other, lease.shard, "b"), "the takeover")
    await tx.commit()
    successor = await takeover
    assert successor.epoch > lease.epoch and successor.adopt
    (run,) = await sched.runs()
    assert run["epoch"] == lease.epoch
