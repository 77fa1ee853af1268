"""A refused backfill is cheap (issue 28, finding 4): its occurrences are counted before any
lock is taken, with no pooled connection held, and the count stops one past the limit, so
refusals of one tenant's huge ranges hold up neither that job's row nor another tenant.

Each test holds the job's row lock from a connection of its own while the refusals run: a
refusal that still counted inside the batch's transaction would wait for that lock (and,
with the pool's few connections parked in the wait, so would everyone else) until the test
gave up on it."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from tickwheel.clock import datetime_to_ms, format_ms
from tickwheel.config import load_settings
from tickwheel.registry_api import on_demand
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.service import make_intake
from tickwheel.registry_api.store import RegistryStore
from tickwheel.stack import Addresses
from tickwheel.testing import drain, produce
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration

SHARDS = 16
DAY_MS = 86_400_000
REFUSALS = 11  # concurrent oversize backfills, as in the probe
ANSWER_WITHIN_S = 60.0  # generous: the old code never answered while the row was held
PER_SECOND = {"id": "hot", "schedule": "* * * * * *", "handler": "x.y"}


def _range_of_25_days() -> dict[str, str]:
    """A range of 25 whole days ending at today's midnight (UTC): 2,160,000 occurrences of a
    per-second job, within the 30 days of retention and not in the future."""
    midnight = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    end = datetime_to_ms(midnight)
    return {"from": format_ms(end - 25 * DAY_MS), "to": format_ms(end)}


@asynccontextmanager
async def _row_held(dsn: str, tenant: str, job_id: str) -> AsyncIterator[None]:
    """The job's row locked FOR UPDATE by another transaction until the block ends."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            locked = await conn.fetchval(
                "SELECT 1 FROM jobs WHERE tenant = $1 AND job_id = $2 FOR UPDATE", tenant, job_id
            )
            assert locked == 1
            yield
    finally:
        await conn.close()


def _spy_counts(monkeypatch: pytest.MonkeyPatch, pool: asyncpg.Pool) -> list[int]:
    """Connections the pool had lent out each time a backfill's occurrences were counted."""
    lent: list[int] = []
    real: Callable[..., list[int]] = on_demand.occurrences

    def counting(*args: Any) -> list[int]:
        lent.append(pool.get_size() - pool.get_idle_size())
        return real(*args)

    monkeypatch.setattr(on_demand, "occurrences", counting)
    return lent


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    # Two connections: two refusals waiting inside a transaction would take them all.
    made = await asyncpg.create_pool(db_dsn, min_size=2, max_size=2)
    yield made
    await made.close()


async def test_oversize_backfills_over_http_are_refused_holding_no_lock_or_connection(
    db_dsn: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 28 finding 4: eleven concurrent 25-day backfills of a per-second job, its row
    locked by another transaction, are each refused with 422 (more than 10,000
    occurrences) while the lock is still held, another tenant's GET answers meanwhile, no
    connection is lent out while a range is counted, and no run is created"""
    store = RegistryStore(pool, SHARDS)
    app = create_app(store, Limits(shards=SHARDS))
    tenant, other = f"a{uuid.uuid4().hex[:10]}", f"b{uuid.uuid4().hex[:10]}"
    key, other_key = await store.create_tenant(tenant), await store.create_tenant(other)
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://r.test") as client,
    ):
        mine = {"Authorization": f"Bearer {key}"}
        theirs = {"Authorization": f"Bearer {other_key}"}
        assert (await client.post("/v1/jobs", json=PER_SECOND, headers=mine)).status_code == 201
        assert (await client.post("/v1/jobs", json=PER_SECOND, headers=theirs)).status_code == 201
        lent = _spy_counts(monkeypatch, pool)
        async with _row_held(db_dsn, tenant, "hot"):
            refusals = [
                client.post("/v1/jobs/hot/backfill", json=_range_of_25_days(), headers=mine)
                for _ in range(REFUSALS)
            ]
            answers = await asyncio.wait_for(
                asyncio.gather(*refusals, client.get("/v1/jobs/hot", headers=theirs)),
                ANSWER_WITHIN_S,
            )
        *refused, read = answers
        assert read.status_code == 200, read.text
        for answer in refused:
            assert answer.status_code == 422, answer.text
            [problem] = answer.json()["detail"]
            assert problem["field"] == "to"
            assert "more than 10,000 occurrences" in problem["message"]
        # One refusal alone: while its range is counted the pool lends nothing.
        lent.clear()
        alone = await client.post("/v1/jobs/hot/backfill", json=_range_of_25_days(), headers=mine)
        assert alone.status_code == 422
        assert lent == [0]
    assert not await pool.fetch("SELECT 1 FROM job_runs WHERE tenant = $1", tenant)


async def test_an_oversize_backfill_on_kafka_is_rejected_holding_no_lock_or_connection(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 28 finding 4: a 25-day backfill of a per-second job on the registrations topic,
    its row locked by another transaction, is rejected (more than 10,000 occurrences) and
    another tenant's registration in the same stream is applied, both while the lock is
    held; the intake's pool lends nothing while the range is counted"""
    store = RegistryStore(pool, SHARDS)
    tenant, other = f"a{uuid.uuid4().hex[:10]}", f"b{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    await store.create_tenant(other)
    # Signatures off, said explicitly: this test is about what a backfill's count costs, not about
    # who may produce; its registrations are unsigned (signatures: test_intake.py,
    # test_intake_replays.py, with the default).
    settings = load_settings(
        dsn=db_dsn,
        kafka=stack.kafka,
        zk=stack.zk,
        topic_prefix=topics.prefix,
        shards=SHARDS,
        intake_require_signature=False,
    )
    first = orjson.dumps({"op": "upsert", "tenant": tenant, "job": PER_SECOND})
    produce(stack.kafka, topics.registrations, [("hot", first)])
    intake = make_intake(store, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(intake.run(stop))
    # The test watches through a connection of its own: a poll through the intake's pool,
    # landing while the intake's thread counts, would be counted as the intake's.
    watcher = await asyncpg.connect(db_dsn)
    try:

        async def stored(who: str) -> bool:
            found = await watcher.fetchval(
                "SELECT count(*) FROM jobs WHERE tenant = $1 AND job_id = 'hot'", who
            )
            return bool(found)

        async def until(check: Callable[[], Any]) -> None:
            while not await check():
                assert not task.done(), task
                await asyncio.sleep(0.1)

        await asyncio.wait_for(until(lambda: stored(tenant)), ANSWER_WITHIN_S)
        lent = _spy_counts(monkeypatch, pool)
        backfill = orjson.dumps(
            {"op": "backfill", "tenant": tenant, "id": "hot", **_range_of_25_days()}
        )
        theirs = orjson.dumps({"op": "upsert", "tenant": other, "job": PER_SECOND})
        async with _row_held(db_dsn, tenant, "hot"):
            produce(stack.kafka, topics.registrations, [("hot", backfill), ("hot", theirs)])
            await asyncio.wait_for(until(lambda: stored(other)), ANSWER_WITHIN_S)
            [letter] = await asyncio.to_thread(drain, stack.kafka, topics.rejected, expect=1)
        body = orjson.loads(letter.value())
        assert base64.b64decode(body["original"]) == backfill
        assert "more than 10,000 occurrences" in body["reason"]
        assert lent == [0]
    finally:
        stop.set()
        await task
        await intake.close()
        await watcher.close()
    assert not await pool.fetch("SELECT 1 FROM job_runs WHERE tenant = $1", tenant)
