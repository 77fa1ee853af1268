"""The chaos harness starts on a kept `--dir` by retiring what earlier invocations left there
(docs/RELIABILITY.md, session 15: an interrupted invocation's every-second cron jobs kept
firing into the next one's rounds, and their republished runs queued ~900,000 messages on the
run topics that the next invocation's workers had to read past)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import asyncpg
import pytest
from confluent_kafka import TopicPartition

from tickwheel.bench.chaos.deployment import PARTITIONS
from tickwheel.bench.chaos.run_topics import SKIP_PATIENCE_S, RunTopics, skip_to_ends
from tickwheel.kafka.admin import create_topics, delete_topics
from tickwheel.kafka.clients import consumer, producer
from tickwheel.queries import QUERIES
from tickwheel.registry_api.store import RegistryStore
from tickwheel.stack import Addresses

from .conftest import upsert_op

pytestmark = pytest.mark.integration

SHARDS = 4
EARLIER = "s137t93183r8"  # a round's tenant, as the harness names them
WARM = "s137t93183warm"  # an invocation's warm-up tenant
OTHER = "s137t93183x"  # close to the harness's names, but not one of them
STATUSES = ("pending", "published", "running", "retrying", "succeeded", "dead", "skipped")


def _every_second(job_id: str) -> dict[str, str]:
    return {"id": job_id, "schedule": "* * * * * *", "handler": "h.run"}


async def _runs_in_every_status(conn: asyncpg.Pool, tenant: str, job_id: str) -> None:
    """One run of the job per status, a second apart, all counted back from one instant read
    once (each insert reading its own clock collided when a second turned between two)."""
    base = await conn.fetchval("SELECT date_trunc('second', now())")
    for i, status in enumerate(STATUSES):
        await conn.execute(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " epoch, lease_until)"
            " VALUES ($1, $2, $3::timestamptz - $4 * interval '1 second', 0,"
            " 'normal', $5, 1, now() + interval '5 seconds')",
            tenant,
            job_id,
            base,
            i,
            status,
        )


async def test_earlier_chaos_tenants_jobs_are_deleted_and_their_unfinished_runs_skipped(
    db_dsn: str,
) -> None:
    """two earlier chaos tenants (a round's, a warm-up's) with active and paused every-second
    jobs and a run in every status, beside a tenant not named as the harness names them: the
    chaos tenants' jobs are deleted (version bumped, so leaders drop them), their pending,
    published, running and retrying runs end skipped with their lease cleared, their finished
    runs are untouched, and nothing of the other tenant changes"""
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=2)
    try:
        store = RegistryStore(pool, SHARDS)
        for tenant in (EARLIER, WARM, OTHER):
            await store.create_tenant(tenant)
            await store.apply([upsert_op(tenant, _every_second(j), SHARDS) for j in ("a", "b")])
            await _runs_in_every_status(pool, tenant, "a")
        await pool.execute(
            "UPDATE jobs SET status = 'paused', version = version + 1"
            " WHERE tenant = $1 AND job_id = 'b'",
            EARLIER,
        )
        before = {
            (r["tenant"], r["job_id"]): r["version"]
            for r in await pool.fetch("SELECT tenant, job_id, version FROM jobs")
        }

        [counts] = await pool.fetch(QUERIES["chaos_retire_earlier"])

        assert (counts["jobs"], counts["runs"]) == (4, 8)
        jobs = {
            (r["tenant"], r["job_id"]): (r["status"], r["version"])
            for r in await pool.fetch("SELECT tenant, job_id, status, version FROM jobs")
        }
        for tenant in (EARLIER, WARM):
            for job_id in ("a", "b"):
                assert jobs[tenant, job_id] == ("deleted", before[tenant, job_id] + 1)
        assert jobs[OTHER, "a"] == ("active", before[OTHER, "a"])
        assert jobs[OTHER, "b"] == ("active", before[OTHER, "b"])
        runs = await pool.fetch(
            "SELECT tenant, status, skip_reason, lease_until IS NULL AS unleased,"
            " finished_at IS NOT NULL AS finished FROM job_runs ORDER BY tenant, scheduled_at DESC"
        )
        by_tenant: dict[str, list[tuple[str, bool, bool]]] = {}
        for r in runs:
            by_tenant.setdefault(r["tenant"], []).append(
                (r["status"], r["unleased"], r["finished"])
            )
            if r["skip_reason"] is not None and r["skip_reason"].startswith("retired"):
                assert r["tenant"] in (EARLIER, WARM)
        for tenant in (EARLIER, WARM):
            assert by_tenant[tenant] == [
                ("skipped", True, True),  # was pending
                ("skipped", True, True),  # published
                ("skipped", True, True),  # running
                ("skipped", True, True),  # retrying
                ("succeeded", False, False),
                ("dead", False, False),
                ("skipped", False, False),
            ]
        assert [status for status, _, _ in by_tenant[OTHER]] == list(STATUSES)

        # Run again (the next invocation on the same stack): nothing is left to retire.
        [again] = await pool.fetch(QUERIES["chaos_retire_earlier"])
        assert (again["jobs"], again["runs"]) == (0, 0)
    finally:
        await pool.close()


def _produce(kafka: str, topic: str, partition: int, values: list[bytes]) -> None:
    prod = producer(kafka)
    for value in values:
        prod.produce(topic, value=value, partition=partition)
    assert prod.flush(30) == 0


def test_the_workers_group_and_the_checker_start_past_earlier_messages(stack: Addresses) -> None:
    """a run topic holding earlier invocations' messages, two partitions partly read by the
    workers' group, one never, one empty: the group's offsets move to every partition's end
    and the unread messages are counted; a topic that does not exist yet is left alone; the
    checker's reader, given those ends, reads only what was produced after them"""
    topic, missing = f"retire-{uuid.uuid4().hex[:8]}", f"retire-none-{uuid.uuid4().hex[:8]}"
    group = f"retire-workers-{uuid.uuid4().hex[:8]}"
    create_topics(stack.kafka, [topic], PARTITIONS, 1)
    try:
        _produce(stack.kafka, topic, 0, [b"old"] * 5)
        _produce(stack.kafka, topic, 1, [b"old"] * 3)
        _produce(stack.kafka, topic, 2, [b"old"] * 4)
        reader = consumer(stack.kafka, group, **{"enable.auto.commit": False})
        reader.commit(
            offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)], asynchronous=False
        )
        reader.close()

        ends, unread = skip_to_ends(stack.kafka, group, [topic, missing])

        assert ends == {(topic, 0): 5, (topic, 1): 3, (topic, 2): 4, (topic, 3): 0}
        assert unread == 3 + 0 + 4
        check = consumer(stack.kafka, group, **{"enable.auto.commit": False})
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert [tp.offset for tp in check.committed(parts, timeout=10)] == [5, 3, 4, 0]
        check.close()

        _produce(stack.kafka, topic, 0, [b"new"] * 2)
        _produce(stack.kafka, topic, 3, [b"new"])
        runs = RunTopics(stack.kafka, [topic], ends)
        try:
            runs.catch_up()
            # Not run envelopes: counted as unreadable, and only the three produced after the ends.
            assert runs.unreadable == 3
            assert runs.by_tenant == {}
        finally:
            runs.close()
    finally:
        delete_topics(stack.kafka, [topic])


# A worker of an earlier invocation, killed with -9 while a member of the workers' group.
_MEMBER = """
import sys, time
from tickwheel.kafka.clients import consumer
member = consumer(sys.argv[1], sys.argv[2], **{"session.timeout.ms": 6000})
member.subscribe([sys.argv[3]])
while not member.assignment():
    member.poll(0.2)
print("joined", flush=True)
time.sleep(600)
"""


def test_the_workers_group_is_moved_once_a_killed_member_has_lapsed(stack: Addresses) -> None:
    """a member of the workers' group killed with -9 (no leave): the broker refuses commits
    from outside the group until its session lapses; the move waits for that and then lands,
    well within its patience"""
    topic, group = f"retire-{uuid.uuid4().hex[:8]}", f"retire-workers-{uuid.uuid4().hex[:8]}"
    create_topics(stack.kafka, [topic], PARTITIONS, 1)
    try:
        _produce(stack.kafka, topic, 1, [b"old"] * 2)
        with subprocess.Popen(
            [sys.executable, "-c", _MEMBER, stack.kafka, group, topic],
            stdout=subprocess.PIPE,
            text=True,
        ) as member:
            try:
                assert member.stdout is not None
                assert member.stdout.readline().strip() == "joined"
            finally:
                member.send_signal(signal.SIGKILL)
                member.wait(10)
        began = time.monotonic()

        ends, unread = skip_to_ends(stack.kafka, group, [topic])

        assert time.monotonic() - began < SKIP_PATIENCE_S
        assert (ends[topic, 1], unread) == (2, 2)
        check = consumer(stack.kafka, group, **{"enable.auto.commit": False})
        [committed] = check.committed([TopicPartition(topic, 1)], timeout=10)
        check.close()
        assert committed.offset == 2
    finally:
        delete_topics(stack.kafka, [topic])
