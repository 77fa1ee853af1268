"""A leader publishes a run to its shard's partition (shard mod the topic's partitions), keyed
by job id: all runs of a job stay on one partition, a claim's runs go out as one request, and
partitions an operator adds receive runs once the outbox reads the count again."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tickwheel.clock import now_ms
from tickwheel.domain import Priority, parse_run_key
from tickwheel.kafka.clients import producer
from tickwheel.shards import outbox as outbox_module
from tickwheel.shards.outbox import Outbox
from tickwheel.shards.store import Dispatch
from tickwheel.stack import Addresses
from tickwheel.testing import drain
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration


def _runs(shard: int, jobs: int, at_ms: int) -> list[Dispatch]:
    return [
        Dispatch("t", f"s{shard}-j{i}", at_ms + k, 1, Priority.NORMAL, "h", None, "{}", 1000)
        for i in range(jobs)
        for k in range(2)  # two runs of each job
    ]


async def test_runs_go_to_their_shards_partition_keyed_by_job_id(
    stack: Addresses, topics: Topics
) -> None:
    """six shards' runs on a topic of two partitions: every message on partition shard % 2,
    keyed by its job id, both runs of a job on the same partition"""
    outbox = Outbox([producer(stack.kafka)], topics)
    at = now_ms()
    try:
        await outbox.warm_up()
        for shard in range(6):
            assert len(await outbox.publish(_runs(shard, 5, at), epoch=1, shard=shard)) == 10
    finally:
        await asyncio.get_running_loop().run_in_executor(None, outbox.close)
    messages = drain(stack.kafka, topics.runs(Priority.NORMAL), expect=60)
    assert len(messages) == 60
    partitions_of_job: dict[str, set[int]] = defaultdict(set)
    for m in messages:
        job_id = (m.key() or b"").decode()
        shard = int(job_id.split("-")[0][1:])
        assert m.partition() == shard % 2, (job_id, m.partition())
        partitions_of_job[job_id].add(m.partition() or 0)
    assert len(partitions_of_job) == 30
    assert all(len(p) == 1 for p in partitions_of_job.values())


async def test_partitions_added_to_a_run_topic_receive_runs_after_the_count_is_read_again(
    stack: Addresses, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """shard 2 publishes to partition 0 of two; after the topic grows to three partitions and
    the count is read again, it publishes to partition 2"""
    topic = topics.runs(Priority.NORMAL)
    outbox = Outbox([producer(stack.kafka)], topics)
    at = now_ms()
    try:
        await outbox.warm_up()
        await outbox.publish(_runs(2, 1, at), epoch=1, shard=2)
        admin = AdminClient({"bootstrap.servers": stack.kafka})
        for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
            future.result(30)
        monkeypatch.setattr(outbox_module, "PARTITIONS_REFRESH_S", 0.0)
        for _ in range(100):  # the broker's metadata shows the new partition within moments
            if await asyncio.to_thread(outbox.partition_of, topic, 2) == 2:
                break
            await asyncio.sleep(0.1)
        await outbox.publish(_runs(2, 1, at + 10), epoch=1, shard=2)
    finally:
        await asyncio.get_running_loop().run_in_executor(None, outbox.close)
    messages = drain(stack.kafka, topic, expect=4)
    by_instant = {}
    for m in messages:
        _tenant, _job, scheduled_ms = parse_run_key(dict(m.headers() or [])["run_key"].decode())
        by_instant[scheduled_ms - at] = m
    assert sorted(by_instant) == [0, 1, 10, 11]
    assert [by_instant[k].partition() for k in (0, 1, 10, 11)] == [0, 0, 2, 2]
