"""Leaders' claims combined into one statement (shards/claims.py, store.claim_many): each is
fenced by its own shard, a leader fenced out loses only its own claim, claims made while a
statement is under way go out together in the next one, and a batch the database refuses
fails only its own leader's claim."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.schedule import ScheduleCache
from tickwheel.sharding import shard_of
from tickwheel.shards import claims as claims_mod
from tickwheel.shards import store
from tickwheel.shards.claims import ClaimCombiner
from tickwheel.shards.plan import ClaimBatch, plan_claims

from .conftest import TEST_SHARDS, SchedEnv

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(sched: SchedEnv) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=4)
    assert p is not None
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """One claim statement at a time; the shards of each statement sent, in order."""
    monkeypatch.setattr(claims_mod, "MAX_IN_FLIGHT", 1)
    shards: list[list[int]] = []
    real = store.claim_many

    async def counted(conn: Any, lease_ms: int, claims: Any) -> Any:
        shards.append([lease.shard for lease, _ in claims])
        return await real(conn, lease_ms, claims)

    monkeypatch.setattr(store, "claim_many", counted)
    return shards


async def _hold_shard_row(other: asyncpg.Connection, shard: int) -> Any:
    """A takeover of `shard` in flight on `other`: its row locked until the transaction
    returned ends (a claim of the shard waits for it; rolled back, the claim goes on)."""
    takeover = other.transaction()
    await takeover.start()
    await other.execute(
        "UPDATE shard_leaders SET epoch = epoch + 1, owner = 'b' WHERE shard_id = $1", shard
    )
    return takeover


async def _one_off_per_shard(
    sched: SchedEnv, conn: asyncpg.Connection, count: int
) -> dict[int, tuple[str, store.Lease, ClaimBatch]]:
    """`count` one-offs due now, each on a shard of its own led by `a`, and the claim `a`
    would make of each: shard → (job id, lease, batch)."""
    by_shard: dict[int, str] = {}
    i = 0
    while len(by_shard) < count:
        job_id = f"combined-{i}"
        by_shard.setdefault(shard_of(sched.tenant, job_id, TEST_SHARDS), job_id)
        i += 1
    at = now_ms() - 1000
    await sched.register(
        *({"id": j, "at": format_ms(at), "handler": "demo.echo"} for j in by_shard.values())
    )
    out = {}
    for shard, job_id in by_shard.items():
        lease = await store.take_over(conn, shard, "a")
        loaded, _ = await store.horizon(conn, shard, now_ms() + 60_000)
        entries = [entry for entry, _ in loaded]
        mine = [e for e in entries if e.key.endswith(job_id)]
        assert len(mine) == 1
        out[shard] = (job_id, lease, plan_claims(mine, now_ms(), ScheduleCache()))
    return out


async def _run_rows(sched: SchedEnv) -> dict[str, tuple[str, int, int]]:
    return {r["job_id"]: (r["status"], r["epoch"], r["shard_id"]) for r in await sched.runs()}


async def test_one_statement_fences_each_shard_by_itself(sched: SchedEnv) -> None:
    """three leaders' claims in one statement, the second shard taken over by `b` before it:
    the first and third commit (their run rows carry their own shard and epoch), the second
    gets FencedOut naming b's epoch and its job is neither advanced nor given a run"""
    conn = await asyncpg.connect(sched.dsn)
    try:
        planned = await _one_off_per_shard(sched, conn, 3)
        (s1, (j1, l1, b1)), (s2, (j2, l2, b2)), (s3, (j3, l3, b3)) = planned.items()
        successor = await store.take_over(conn, s2, "b")
        outcomes = await store.claim_many(conn, 30_000, [(l1, b1), (l2, b2), (l3, b3)])
    finally:
        await conn.close()
    first, second, third = outcomes
    assert isinstance(first, store.Claimed) and isinstance(third, store.Claimed)
    assert [r.job_id for r in first.runs] == [j1] and first.jobs == {(sched.tenant, j1)}
    assert [r.job_id for r in third.runs] == [j3] and third.jobs == {(sched.tenant, j3)}
    assert isinstance(second, store.FencedOut) and second.shard == s2
    assert f"now ({successor.epoch}, 'b')" in str(second)
    assert await _run_rows(sched) == {
        j1: ("pending", l1.epoch, s1),
        j3: ("pending", l3.epoch, s3),
    }
    (job,) = await sched.fetch(
        "SELECT status FROM jobs WHERE tenant = $1 AND job_id = $2", sched.tenant, j2
    )
    assert job["status"] == "active"


async def test_claims_made_while_one_is_under_way_go_out_together(
    sched: SchedEnv, pool: asyncpg.Pool, sent: list[list[int]]
) -> None:
    """one statement at a time: the first claim waits for its shard's row (a takeover in
    flight that then rolls back); the two made meanwhile go out in ONE next statement, and
    every claim commits with its own runs"""
    conn = await asyncpg.connect(sched.dsn)
    other = await asyncpg.connect(sched.dsn)
    try:
        planned = await _one_off_per_shard(sched, conn, 3)
        (s1, (j1, l1, b1)), (s2, (j2, l2, b2)), (s3, (j3, l3, b3)) = planned.items()
        takeover = await _hold_shard_row(other, s1)
        combiner = ClaimCombiner(pool, 30_000, 5000)
        first = asyncio.ensure_future(combiner.claim(l1, b1))
        await asyncio.sleep(0.3)
        assert not first.done(), "the first claim did not wait for its shard's row"
        later = [
            asyncio.ensure_future(combiner.claim(lease, b)) for lease, b in ((l2, b2), (l3, b3))
        ]
        await asyncio.sleep(0.3)
        assert sent == [[s1]], "a claim went out while one was under way"
        await takeover.rollback()
        claimed = [await first, *[await c for c in later]]
    finally:
        await other.close()
        await conn.close()
    assert sent == [[s1], [s2, s3]]
    assert [[r.job_id for r in c.runs] for c in claimed] == [[j1], [j2], [j3]]
    rows = await _run_rows(sched)
    assert rows == {
        j1: ("pending", l1.epoch, s1),
        j2: ("pending", l2.epoch, s2),
        j3: ("pending", l3.epoch, s3),
    }


async def test_a_batch_the_database_refuses_fails_only_its_own_claim(
    sched: SchedEnv, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """three claims combined, the middle one planning a run status the table refuses: the
    combined statement fails, each claim is sent again alone, and only the middle one fails
    (with the database's error); the others commit"""
    monkeypatch.setattr(claims_mod, "MAX_IN_FLIGHT", 1)
    conn = await asyncpg.connect(sched.dsn)
    other = await asyncpg.connect(sched.dsn)
    try:
        planned = await _one_off_per_shard(sched, conn, 4)
        (s0, (_, l0, b0)), *rest = planned.items()
        (s1, (j1, l1, b1)), (_, (j2, l2, b2)), (s3, (j3, l3, b3)) = rest
        b2.run_status[:] = ["bogus"] * len(b2.run_status)
        combiner = ClaimCombiner(pool, 30_000, 5000)
        # Hold the one statement slot with a claim waiting for its shard's row, so that the
        # three are queued and go out together.
        takeover = await _hold_shard_row(other, s0)
        holder = asyncio.ensure_future(combiner.claim(l0, b0))
        await asyncio.sleep(0.3)
        tasks = [
            asyncio.ensure_future(combiner.claim(lease, b))
            for lease, b in ((l1, b1), (l2, b2), (l3, b3))
        ]
        await asyncio.sleep(0.1)
        await takeover.rollback()
        await holder
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await other.close()
        await conn.close()
    assert isinstance(outcomes[1], asyncpg.CheckViolationError)
    assert [[r.job_id for r in c.runs] for c in (outcomes[0], outcomes[2])] == [[j1], [j3]]
    rows = await _run_rows(sched)
    assert j2 not in rows
    assert rows[j1] == ("pending", l1.epoch, s1) and rows[j3] == ("pending", l3.epoch, s3)


async def test_a_claim_whose_leader_stopped_waiting_is_not_sent(
    sched: SchedEnv, pool: asyncpg.Pool, sent: list[list[int]]
) -> None:
    """a leader stopped (its task cancelled) while its claim waited for the statement under
    way: that claim is dropped unsent, its job not advanced; the claim queued after it goes
    out in the next statement and commits"""
    conn = await asyncpg.connect(sched.dsn)
    other = await asyncpg.connect(sched.dsn)
    try:
        planned = await _one_off_per_shard(sched, conn, 3)
        (s1, (j1, l1, b1)), (_, (j2, l2, b2)), (s3, (j3, l3, b3)) = planned.items()
        takeover = await _hold_shard_row(other, s1)
        combiner = ClaimCombiner(pool, 30_000, 5000)
        first = asyncio.ensure_future(combiner.claim(l1, b1))
        await asyncio.sleep(0.3)
        stopped = asyncio.ensure_future(combiner.claim(l2, b2))
        last = asyncio.ensure_future(combiner.claim(l3, b3))
        await asyncio.sleep(0.1)
        stopped.cancel()
        await takeover.rollback()
        await first
        claimed = await last
    finally:
        await other.close()
        await conn.close()
    assert stopped.cancelled()
    assert sent == [[s1], [s3]]
    assert [r.job_id for r in claimed.runs] == [j3]
    assert set(await _run_rows(sched)) == {j1, j3}
    (job,) = await sched.fetch(
        "SELECT status FROM jobs WHERE tenant = $1 AND job_id = $2", sched.tenant, j2
    )
    assert job["status"] == "active"
