"""The change feed and its NOTIFY hint: a poller misses no commit, whatever the commit order."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from tickwheel.clock import now_ms
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore
from tickwheel.sharding import shard_of

pytestmark = pytest.mark.integration

SHARDS = 4


def _op(tenant: str, job_id: str, shards: int = SHARDS) -> Op:
    doc = parse_document({"id": job_id, "schedule": "* * * * *", "handler": "h.run"})
    return Op(
        "upsert", tenant, job_id, spec=validate_job(tenant, doc, Limits(shards=shards), now_ms())
    )


async def _feed(conn: asyncpg.Connection, shard: int, since: str) -> tuple[str, set[str]]:
    position = await conn.fetchval(QUERIES["feed_position"])
    rows = await conn.fetch(QUERIES["jobs_changed_since"], [shard], since)
    return position, {r["job_id"] for r in rows}


async def test_registration_appears_on_its_shard_feed_with_a_notify(db_dsn: str) -> None:
    """a registered job is on its shard's feed at once, and LISTEN hears its shard id"""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=2)
    store = RegistryStore(pool, shards=SHARDS)
    await store.create_tenant(tenant)
    listener = await asyncpg.connect(db_dsn)
    heard: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(*args: Any) -> None:
        heard.put_nowait(args[3])

    await listener.add_listener("tickwheel_jobs", on_notify)
    try:
        shard = shard_of(tenant, "soon", SHARDS)
        since = await listener.fetchval(QUERIES["feed_position"])
        await store.apply([_op(tenant, "soon")])
        assert await asyncio.wait_for(heard.get(), 5) == str(shard)
        _, seen = await _feed(listener, shard, since)
        assert "soon" in seen
        _, elsewhere = await _feed(listener, (shard + 1) % SHARDS, since)
        assert "soon" not in elsewhere
    finally:
        await listener.close()
        await pool.close()


async def test_out_of_order_commits_are_not_missed(db_dsn: str) -> None:
    """a slow transaction that wrote first but commits after a poll is seen by the next poll"""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=3)
    store = RegistryStore(pool, shards=1)
    await store.create_tenant(tenant)
    poller = await asyncpg.connect(db_dsn)
    slow = await asyncpg.connect(db_dsn)
    try:
        since = await poller.fetchval(QUERIES["feed_position"])
        tx = slow.transaction()
        await tx.start()
        await slow.execute(
            "INSERT INTO jobs (tenant, job_id, shard_id, kind, schedule, handler, document,"
            " next_run_at) VALUES ($1, 'slow', 0, 'cron', '* * * * *', 'h.run', '{}', now())",
            tenant,
        )
        await store.apply([_op(tenant, "fast", shards=1)])
        since, seen = await _feed(poller, 0, since)
        assert seen == {"fast"}
        await tx.commit()
        _, seen = await _feed(poller, 0, since)
        assert "slow" in seen
    finally:
        await slow.close()
        await poller.close()
        await pool.close()
