"""A worker that stops consuming while it looks alive ends itself (I9): messages left unread
past its position on a partition it holds and fetches, its consumer out of the group, or a
database call that never returns, end the `watch` part with `WorkerStalled` and the process
with exit 1 within the stall window. An idle worker, and one whose level is paused because its
queue is full of slow runs, go on. Real Kafka and Postgres."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from tickwheel import db, handler
from tickwheel.config import Settings
from tickwheel.deployment import worker_group
from tickwheel.runtime import EXIT_OK, EXIT_PART_DIED, Process
from tickwheel.stack import Addresses
from tickwheel.testing import produce
from tickwheel.topics import Topics
from tickwheel.workers.handlers import Context
from tickwheel.workers.service import Worker, make_worker

from .test_workers import RunSpec, create_runs, publish, runs_of, worker_settings

pytestmark = pytest.mark.integration

STALL_S = 4.0  # the window under test (the setting's floor is 10 s; the watch takes any)


@handler("it.stall.slow")
async def slow(_ctx: Context, payload: Any) -> None:
    await asyncio.sleep(payload["sleep_s"])


@asynccontextmanager
async def started(settings: Settings) -> AsyncIterator[tuple[Worker, Process, asyncio.Task[int]]]:
    """A worker with the short window, running, once its consumer holds partitions."""
    pool = await asyncpg.create_pool(settings.effective_dsn, min_size=1, max_size=4)
    process = Process("test-worker")
    worker = make_worker(
        settings, pool, f"w-{uuid.uuid4().hex[:6]}", 1, run_seal=await db.run_seal(pool)
    )
    worker.watch.stall_s = STALL_S
    process.on_close(pool.close)
    worker.start(process)
    task = asyncio.create_task(process.run(signals=False, grace_s=5))
    try:
        deadline = time.monotonic() + 30
        while not (await worker.source.holding())[0]:
            assert time.monotonic() < deadline, "the worker never got its partitions"
            assert not task.done(), task
            await asyncio.sleep(0.1)
        yield worker, process, task
    finally:
        process.request_stop()
        await asyncio.wait({task}, timeout=30)


async def stalled(worker: Worker, process: Process, task: asyncio.Task[int]) -> str:
    """What the watch said when it ended the process (exit 1), within three windows."""
    done, _ = await asyncio.wait({task}, timeout=STALL_S * 3)
    assert done, f"the worker did not end within {STALL_S * 3} s"
    assert task.result() == EXIT_PART_DIED
    error = process.health["watch"].error or ""
    assert error.startswith("WorkerStalled: worker stalled: "), error
    assert worker.watch.stalled is not None and worker.watch.stalled in error
    assert all(state.error is None for name, state in process.health.items() if name != "watch")
    return worker.watch.stalled


@pytest.mark.foreign_messages("runs.normal")
async def test_held_partitions_no_longer_fetched_end_the_worker(
    stack: Addresses, db_dsn: str, topics: Topics
) -> None:
    """Paused behind the fetcher's back (a wedged fetch looks the same): the messages waiting
    past its position end the process, naming the partition and the offset."""
    settings = worker_settings(stack, db_dsn, topics)
    async with started(settings) as (worker, process, task):
        consumer = worker.source.consumer
        await worker.source.call(lambda: consumer.pause(consumer.assignment()))
        began = time.monotonic()
        produce(stack.kafka, topics.runs("normal"), [(f"k{i}", b"x") for i in range(8)])
        said = await stalled(worker, process, task)
        assert time.monotonic() - began >= STALL_S - 1
        assert f"{topics.runs('normal')}[" in said
        assert "(held by this consumer): " in said and "waiting after offset 0" in said


async def test_a_worker_out_of_its_group_ends(
    stack: Addresses, db_dsn: str, topics: Topics
) -> None:
    """Its consumer left the group and never came back (as one stuck rejoining does), with
    nothing waiting on any topic: the group's member list alone ends the process."""
    settings = worker_settings(stack, db_dsn, topics)
    async with started(settings) as (worker, process, task):
        await worker.source.call(worker.source.consumer.unsubscribe)
        said = await stalled(worker, process, task)
        assert f"this worker (worker-{worker.worker_id}) has not been a member" in said
        assert f"of its group {worker_group(topics.prefix)} for " in said


async def test_a_claim_that_never_returns_ends_the_worker(
    stack: Addresses, db_dsn: str, topics: Topics
) -> None:
    """The dispatch waits on a claim forever (a call that never returns): its queue would fill
    and pause the level, which the topic samples rightly leave alone; the call under way for
    the window ends the process, and the run was never claimed (its message is redelivered to
    the next worker)."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    settings = worker_settings(stack, db_dsn, topics)
    specs = [RunSpec("hung-claim", handler="it.stall.slow", payload={"sleep_s": 0})]
    await create_runs(db_dsn, tenant, specs)
    async with started(settings) as (worker, process, task):

        async def never(*_args: Any) -> Any:
            await asyncio.Event().wait()

        worker.store.claim_isolating = never  # type: ignore[method-assign]
        publish(stack.kafka, topics, tenant, specs)
        said = await stalled(worker, process, task)
        assert said.startswith("a claim begun ") and said.endswith(" s ago has not returned")
    assert (await runs_of(db_dsn, tenant))["hung-claim"]["status"] == "published"


async def test_an_idle_worker_and_one_paused_by_slow_runs_go_on(
    stack: Addresses, db_dsn: str, topics: Topics
) -> None:
    """Nothing waiting is no stall, however long. One slot busy with a long run, a queue cap
    of 2 and one message per fetch: the level pauses with messages waiting past its position
    for several windows, which is the fetcher's own doing, not a stall."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    settings = worker_settings(
        stack, db_dsn, topics, worker_queue_per_priority=2, worker_batch=1, worker_grace_s=0.5
    )
    specs = [
        RunSpec(
            f"slow-{i}",
            handler="it.stall.slow",
            payload={"sleep_s": STALL_S * 4},
            timeout_ms=60_000,
        )
        for i in range(8)
    ]
    await create_runs(db_dsn, tenant, specs)
    async with started(settings) as (worker, process, task):
        await asyncio.sleep(STALL_S * 2)  # idle, at the topics' ends
        assert not task.done(), task
        publish(stack.kafka, topics, tenant, specs)
        deadline = time.monotonic() + 30
        while "normal" not in worker.fetcher.paused:
            assert time.monotonic() < deadline, "the level never paused"
            await asyncio.sleep(0.1)
        _, positions = await worker.source.holding()
        waiting = len(specs) - sum(
            n for (topic, _), n in positions.items() if topic == topics.runs("normal")
        )
        assert waiting > 0, positions  # messages do wait past the position meanwhile
        await asyncio.sleep(STALL_S * 2.5)
        assert not task.done(), task
        assert worker.watch.stalled is None
        assert sum(r["status"] == "running" for r in (await runs_of(db_dsn, tenant)).values()) == 1
        process.request_stop()
        assert await task == EXIT_OK
