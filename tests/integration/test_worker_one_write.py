"""The worker's one write (I4) on the real stack: a first delivery of a fresh claim runs without
a claim and its result is the only write of its row; a copy a leader sent again is claimed first
and skipped once the run is done; a rebalance takes partitions away only after the runs in hand
are marked `running`, so their next owner runs nothing twice; a long run is marked at a
heartbeat; a worker killed with a run in hand has it run again under the same attempt.

Two of these also run against the broken builds of tickwheel/broken.py that switch the guard
off, and must see the double execution the guard prevents: they can fail.
"""

# The fixtures of test_workers.py are imported by name for pytest; the tests name them again.
# ruff: noqa: F811

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from confluent_kafka import ConsumerGroupState

from tickwheel import broken, handler
from tickwheel.deployment import worker_group
from tickwheel.envelopes.run import AGAIN_HEADER
from tickwheel.kafka.clients import admin_client, producer
from tickwheel.run_seal import SEAL_HEADER, RunSeal
from tickwheel.stack import Addresses
from tickwheel.topics import Topics
from tickwheel.workers.handlers import Context

from .test_workers import (  # noqa: F401  (the fixtures exec_log, seal_key, tenant, workers)
    RunSpec,
    Subprocesses,
    committed_total,
    create_runs,
    exec_log,
    executions,
    running_worker,
    runs_of,
    seal_key,
    statuses_are,
    tenant,
    wait_for,
    worker_settings,
    workers,
)

pytestmark = pytest.mark.integration

PARTITIONS = 2  # of each run topic on the test stack
FIRST_FETCH_S = 2.0  # a worker fetches without pause: its partitions' first fetch is done by then


def publish_sealed(
    kafka: str, topics: Topics, tenant: str, specs: list[RunSpec], key: bytes, again: bool = False
) -> None:
    """The specs' envelopes, sealed as a leader seals them, each to partition 0 or 1 by its
    position (a run's copies go where the run went, as a leader's do: one partition per shard);
    `again`: with the header a leader puts on a run it sends again."""
    prod = producer(kafka)
    for i, spec in enumerate(specs):
        env = spec.envelope(tenant)
        value = env.encode()
        headers = [*env.headers(), (SEAL_HEADER, RunSeal(key).seal(value))]
        if again:
            headers.append((AGAIN_HEADER, b"1"))
        prod.produce(
            topics.runs(env.priority),
            key=env.job_id.encode(),
            value=value,
            headers=headers,
            partition=i % PARTITIONS,
        )
    assert prod.flush(30) == 0


async def group_stable(kafka: str, topics: Topics, members: int) -> bool:
    """The workers' group is stable with `members` members, each holding partitions."""
    admin = admin_client(kafka)
    group = worker_group(topics.prefix)
    found = await asyncio.to_thread(lambda: admin.describe_consumer_groups([group])[group].result())
    return bool(
        found.state == ConsumerGroupState.STABLE
        and len(found.members) == members
        and all(m.assignment.topic_partitions for m in found.members)
    )


async def fetching(kafka: str, topics: Topics, members: int) -> None:
    """The workers' group stable with `members`, and each member past its partitions' first
    fetch: a worker judges the deliveries of its first fetch of a partition suspect (what lies
    below the partition's end then may be a previous owner's), so the tests' runs are
    published once the partitions are known empty."""
    await wait_for(lambda: group_stable(kafka, topics, members), 60, "the group stable")
    await asyncio.sleep(FIRST_FETCH_S)


async def install_update_log(dsn: str) -> None:
    """A trigger that notes every update of a run row: (job, status before, status after)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            """
            CREATE TABLE test_run_updates (job_id text, old_status text, new_status text);
            CREATE FUNCTION test_note_run_update() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO test_run_updates VALUES (OLD.job_id, OLD.status, NEW.status);
                RETURN NEW;
            END $$;
            CREATE TRIGGER test_note_run_update AFTER UPDATE ON job_runs
                FOR EACH ROW EXECUTE FUNCTION test_note_run_update();
            """
        )
    finally:
        await conn.close()


async def run_updates(dsn: str) -> list[tuple[str, str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT job_id, old_status, new_status FROM test_run_updates")
    finally:
        await conn.close()
    return sorted((r[0], r[1], r[2]) for r in rows)


@handler("it.one_write.sleep")
async def sleep(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(payload.get("sleep_s", 0))


async def test_a_first_delivery_runs_without_a_claim_and_its_result_is_the_only_write(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, seal_key: bytes
) -> None:
    """sealed runs published after the worker holds its partitions start at once: each run
    row is updated exactly once, from dispatched to succeeded, and records the worker, its
    start and its publish instant"""
    specs = [RunSpec(f"job-{i}", handler="it.one_write.sleep") for i in range(40)]
    await create_runs(db_dsn, tenant, specs)
    await install_update_log(db_dsn)
    settings = worker_settings(stack, db_dsn, topics)
    async with running_worker(settings) as worker:
        await fetching(stack.kafka, topics, 1)
        assert not worker.fetcher._ends_unknown  # every partition's end known: none suspect
        publish_sealed(stack.kafka, topics, tenant, specs, seal_key)
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 40), 30, "succeeded")
        assert worker.metrics.started_unclaimed._value.get() == 40
        claimed = sum(worker.metrics.claimed.labels(c)._value.get() for c in ("sealed", "job_row"))
        assert claimed == 0
    updates = await run_updates(db_dsn)
    assert updates == sorted((s.job_id, "published", "succeeded") for s in specs)
    rows = await runs_of(db_dsn, tenant)
    conn = await asyncpg.connect(db_dsn)
    try:
        published = await conn.fetch(
            "SELECT job_id, published_at FROM job_runs WHERE tenant = $1", tenant
        )
    finally:
        await conn.close()
    assert all(r["published_at"] is not None for r in published)
    for row in rows.values():
        assert row["worker"] == worker.worker_id
        assert row["started_at"] is not None and row["started_at"] <= row["finished_at"]


@pytest.mark.parametrize("variant", [None, broken.SUSPECT_IGNORED])
async def test_a_copy_sent_again_after_the_result_is_claimed_and_skipped(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
    seal_key: bytes,
    variant: str | None,
) -> None:
    """copies of finished runs with the `again` header (a leader's re-publish after a lapsed
    lease or at a takeover) are claimed, find the runs finished and are skipped: each run
    executed once. The broken build that starts them without a claim runs each twice"""
    specs = [RunSpec(f"job-{i}", handler="test.sync_record") for i in range(10)]
    await create_runs(db_dsn, tenant, specs)
    env = {} if variant is None else {broken.ENV: variant}
    workers.start("w1", **env)
    await fetching(stack.kafka, topics, 1)
    publish_sealed(stack.kafka, topics, tenant, specs, seal_key)
    await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 10), 30, "succeeded")
    publish_sealed(stack.kafka, topics, tenant, specs, seal_key, again=True)
    group = worker_group(topics.prefix)

    async def copies_consumed() -> bool:
        done = await asyncio.to_thread(committed_total, stack.kafka, group, [topics.runs("normal")])
        return bool(done == 20)

    await wait_for(copies_consumed, 30, "the copies consumed")
    counts = executions(exec_log)
    expected = 1 if variant is None else 2
    assert Counter(counts.values()) == {expected: 10}, counts


@pytest.mark.parametrize("variant", [None, broken.RELEASE_UNMARKED])
async def test_a_rebalance_runs_nothing_twice(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
    seal_key: bytes,
    variant: str | None,
) -> None:
    """a second worker joins while the first holds 8 runs started without a claim: the first
    marks them running before it lets their partitions go, the second's claims of the
    redeliveries find them taken, each run executes once and its result is the first worker's.
    The broken build that lets the partitions go unmarked runs the moved ones twice"""
    specs = [RunSpec(f"job-{i}", handler="test.sleep", payload={"sleep_s": 6}) for i in range(8)]
    await create_runs(db_dsn, tenant, specs)
    env = {} if variant is None else {broken.ENV: variant}
    workers.start("w1", "--concurrency", "8", **env)
    await fetching(stack.kafka, topics, 1)
    publish_sealed(stack.kafka, topics, tenant, specs, seal_key)

    async def all_begun() -> bool:
        return sum(executions(exec_log).values()) >= 8

    await wait_for(all_begun, 30, "w1 runs all 8")
    workers.start("w2", "--concurrency", "8", **env)
    await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 8), 60, "succeeded")
    await asyncio.sleep(7)  # a second execution started by w2 would have begun by now
    counts = executions(exec_log)
    if variant is None:
        assert set(counts.values()) == {1}, counts
        rows = await runs_of(db_dsn, tenant)
        assert {r["worker"] for r in rows.values()} == {"w1"}
        assert "runs in hand marked running" in workers.log_of("w1")
    else:
        assert max(counts.values()) == 2, counts


async def test_a_long_run_is_marked_running_at_a_heartbeat(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, seal_key: bytes
) -> None:
    """a run started without a claim and still running at a heartbeat is marked `running`
    under its worker with a lease, then succeeds: long runs stay visible, short ones are not
    written before their result"""
    specs = [
        RunSpec("long", handler="it.one_write.sleep", payload={"sleep_s": 3.5}),
        RunSpec("short", handler="it.one_write.sleep", payload={"sleep_s": 0}),
    ]
    await create_runs(db_dsn, tenant, specs)
    await install_update_log(db_dsn)
    settings = worker_settings(stack, db_dsn, topics, lease_s=3)  # a heartbeat each second
    async with running_worker(settings) as worker:
        await fetching(stack.kafka, topics, 1)
        publish_sealed(stack.kafka, topics, tenant, specs, seal_key)
        await wait_for(lambda: statuses_are(db_dsn, tenant, "running", 1), 10, "long marked")
        row = (await runs_of(db_dsn, tenant))["long"]
        assert row["worker"] == worker.worker_id and row["lease_until"] > row["db_now"]
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 2), 30, "succeeded")
        assert worker.metrics.marked.labels("marked")._value.get() == 1
    changes = [u for u in await run_updates(db_dsn) if u[1] != u[2]]  # not the heartbeats
    assert changes == [
        ("long", "published", "running"),
        ("long", "running", "succeeded"),
        ("short", "published", "succeeded"),
    ]


async def test_a_worker_killed_with_a_run_in_hand_has_it_run_again_under_the_same_attempt(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
    seal_key: bytes,
) -> None:
    """kill -9 while a run started without a claim is in hand: its message is delivered again
    to the next worker, which claims it (a delivery below the end its partition had when it
    was assigned is suspect), runs it under the same attempt and records one success"""
    spec = RunSpec("slow", payload={"sleep_first_s": 20}, timeout_ms=60_000)
    await create_runs(db_dsn, tenant, [spec])
    first = workers.start("w1", TICKWHEEL_LEASE_S="60")
    await fetching(stack.kafka, topics, 1)
    publish_sealed(stack.kafka, topics, tenant, [spec], seal_key)

    async def begun() -> bool:
        return sum(executions(exec_log).values()) == 1

    await wait_for(begun, 30, "w1 runs it")
    first.send_signal(signal.SIGKILL)
    first.wait()
    started = time.monotonic()
    workers.start("w2", TICKWHEEL_LEASE_S="60")
    await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 90, "succeeded")
    rows = await runs_of(db_dsn, tenant)
    assert rows["slow"]["attempt"] == 1 and rows["slow"]["worker"] == "w2"
    assert executions(exec_log) == Counter({f"{spec.envelope(tenant).run_key} 1": 2})
    # The same attempt at once: no wait for a lease (60 s) to lapse.
    assert time.monotonic() - started < 60
