"""An intake that stops consuming while it looks alive ends itself (I9): registrations fetched
and never settled, or left unread on the topic by a consumer that no longer fetches or holds no
partition, end the part with `IntakeStalled` within the stall window; an idle intake and one
backing off from a failure it reports go on. Real Kafka and Postgres."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson
import pytest

from tickwheel.config import Settings
from tickwheel.registry_api.intake import IntakeStalled, RegistrationIntake
from tickwheel.registry_api.service import make_intake
from tickwheel.registry_api.store import RegistryStore
from tickwheel.stack import Addresses
from tickwheel.testing import produce
from tickwheel.topics import Topics

from .conftest import intake_committed, stack_settings

pytestmark = pytest.mark.integration

STALL_S = 3.0  # the window under test (the setting's floor is 10 s; the class takes any)


class HangingStore(RegistryStore):
    """A store whose tenant lookup waits forever while `hang` is set, or raises a database
    outage while `fail` is set (the intake's loop then backs off and says `failing`)."""

    hang = False
    fail = False

    async def existing_tenants(self, names: list[str]) -> set[str]:
        if self.fail:
            raise ConnectionRefusedError("the database is down (test)")
        if self.hang:
            await asyncio.Event().wait()
        return await super().existing_tenants(names)


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[HangingStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield HangingStore(pool, shards=16)
    await pool.close()


@pytest.fixture
def settings(stack: Addresses, db_dsn: str, topics: Topics) -> Settings:
    return stack_settings(stack, db_dsn, topics, intake_require_signature=False)


def _upsert(tenant: str, job_id: str) -> bytes:
    job = {"id": job_id, "schedule": "*/5 * * * *", "handler": "demo.echo"}
    return orjson.dumps({"op": "upsert", "tenant": tenant, "job": job})


async def _started(
    settings: Settings, store: RegistryStore, stop: asyncio.Event | None = None
) -> tuple[RegistrationIntake, Any]:
    """An intake with the short window, running, once it holds its partitions."""
    intake = make_intake(store, settings)
    intake.stall_s = STALL_S
    task = asyncio.create_task(intake.run(stop or asyncio.Event()))
    deadline = time.monotonic() + 30
    while not intake.health.detail.get("partitions"):
        assert time.monotonic() < deadline, "the intake never got its partitions"
        assert not task.done(), task
        await asyncio.sleep(0.1)
    return intake, task


async def _stalled(task: Any) -> str:
    """The text of the `IntakeStalled` the intake ended with, within four windows."""
    done, _ = await asyncio.wait({task}, timeout=STALL_S * 4)
    assert done, f"the intake did not end within {STALL_S * 4} s"
    exc = task.exception()
    assert isinstance(exc, IntakeStalled), exc
    return str(exc)


async def _stored(db_dsn: str, tenant: str) -> list[str]:
    conn = await asyncpg.connect(db_dsn)
    try:
        rows = await conn.fetch("SELECT job_id FROM jobs WHERE tenant = $1", tenant)
    finally:
        await conn.close()
    return sorted(r["job_id"] for r in rows)


async def test_a_loop_that_never_settles_its_batch_ends_the_intake(
    settings: Settings, store: HangingStore, db_dsn: str, topics: Topics
) -> None:
    """The loop waits forever inside a batch (a call that never returns): the watch ends the
    part, says how long the batch has waited and where the loop waits; nothing was applied or
    committed, so a restarted intake gets every registration again."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    intake, task = await _started(settings, store)
    try:
        store.hang = True
        produce(
            settings.effective_kafka,
            topics.registrations,
            [(f"j{i}", _upsert(tenant, f"j{i}")) for i in range(3)],
        )
        began = time.monotonic()
        said = await _stalled(task)
        assert time.monotonic() - began >= STALL_S - 0.5
        assert "a batch of registrations fetched" in said and "has not settled" in said
        assert intake.health.detail["stalled"] in said
        assert intake.health.detail["consuming"] is False
    finally:
        await intake.close()
    assert await _stored(db_dsn, tenant) == []
    assert intake_committed(settings) == 0
    store.hang = False  # the supervisor's restart: the same registrations, applied
    again = make_intake(store, settings)
    stop = asyncio.Event()
    rerun = asyncio.create_task(again.run(stop))
    try:
        deadline = time.monotonic() + 30
        while await _stored(db_dsn, tenant) != ["j0", "j1", "j2"]:
            assert time.monotonic() < deadline and not rerun.done(), rerun
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await rerun
        await again.close()


async def test_a_consumer_that_stops_fetching_ends_the_intake(
    settings: Settings, store: HangingStore, topics: Topics
) -> None:
    """Its partitions held but not fetched (paused, as a wedged fetcher would be): the messages
    waiting past its position end the part, naming the partition and its offset."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    intake, task = await _started(settings, store)
    try:
        consumer = intake.source.consumer
        await intake.source.call(lambda: consumer.pause(consumer.assignment()))
        produce(
            settings.effective_kafka,
            topics.registrations,
            [(f"k{i}", _upsert(tenant, f"k{i}")) for i in range(4)],
        )
        said = await _stalled(task)
        assert "(held by this consumer)" in said
        assert "message(s) waiting after offset 0" in said
    finally:
        await intake.close()


async def test_a_consumer_holding_no_partition_while_messages_wait_ends_the_intake(
    settings: Settings, store: HangingStore, topics: Topics
) -> None:
    """Out of its group (as a consumer stuck rejoining is): nobody reads the topic, and the
    group's committed offsets stand still behind its end."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    intake, task = await _started(settings, store)
    try:
        await intake.source.call(intake.source.consumer.unsubscribe)
        produce(settings.effective_kafka, topics.registrations, [("m", _upsert(tenant, "m"))])
        said = await _stalled(task)
        assert "held by no one this consumer sees" in said
        assert "(partitions held: none)" in said
    finally:
        await intake.close()


async def test_an_idle_intake_and_one_backing_off_go_on(
    settings: Settings, store: HangingStore, db_dsn: str, topics: Topics
) -> None:
    """Nothing waiting is no stall, however long; nor is a database outage the loop reports as
    `failing` and retries. Once the database answers, the registration lands."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    stop = asyncio.Event()
    intake, task = await _started(settings, store, stop)
    try:
        await asyncio.sleep(STALL_S * 2)  # idle, at the topic's end
        assert not task.done(), task
        store.fail = True
        produce(settings.effective_kafka, topics.registrations, [("n", _upsert(tenant, "n"))])
        deadline = time.monotonic() + 30
        while not intake.health.detail.get("failing"):
            assert time.monotonic() < deadline, "the loop never reported the outage"
            await asyncio.sleep(0.1)
        await asyncio.sleep(STALL_S * 2)
        assert not task.done(), task
        store.fail = False
        while await _stored(db_dsn, tenant) != ["n"]:
            assert time.monotonic() < deadline + 30 and not task.done(), task
            await asyncio.sleep(0.2)
        assert "stalled" not in intake.health.detail
    finally:
        stop.set()
        await task
        await intake.close()
