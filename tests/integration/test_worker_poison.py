"""One message on a run topic never stops a worker (issue 28, the two high findings): a forged
envelope whose values the run ledger cannot hold is dead-lettered with its reason while the
runs batched beside it succeed, and a message of hundreds of kilobytes is dead-lettered within
one message; in both cases the worker stays alive and quiet, and a restart does not replay the
poison (its offset was committed)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

import pytest

from tickwheel.deployment import worker_group
from tickwheel.envelopes.dead_letters import UnreadableRun
from tickwheel.stack import Addresses
from tickwheel.testing import produce
from tickwheel.topics import Topics

from .test_workers import (
    RunSpec,
    committed_total,
    create_runs,
    drain_values,
    publish,
    running_worker,
    statuses_are,
    wait_for,
    worker_settings,
)

# Every test here puts forged or garbage messages of its own on runs.low.
pytestmark = [pytest.mark.integration, pytest.mark.foreign_messages("runs.low")]

RUN_TOPICS = ("high", "normal", "low")


def _forged(
    tenant: str, *, scheduled_at: int = 1_900_000_000_000, attempt: int = 1, job_id: str = "nightly"
) -> bytes:
    """The hostile probe's envelope (issue 28) with some values replaced, written by hand:
    orjson refuses integers beyond 64 bits, and the probe's are."""
    key = f"{tenant}/{job_id}@{scheduled_at}"
    return (
        f'{{"v": 1, "run_key": {json.dumps(key)}, "tenant": {json.dumps(tenant)},'
        f' "job_id": {json.dumps(job_id)}, "scheduled_at": {scheduled_at},'
        f' "attempt": {attempt}, "epoch": 1, "priority": "low", "payload": {{}},'
        ' "timeout_ms": 1000, "handler": "x.y"}'
    ).encode()


def _quiet(records: list[logging.LogRecord]) -> list[str]:
    """The worker's log lines that carry a traceback (there must be none)."""
    return [r.getMessage() for r in records if r.exc_info and r.name.startswith("tickwheel")]


async def test_forged_envelopes_the_ledger_cannot_hold_are_dead_lettered_and_the_batch_runs(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """scheduled_at 2^63, -2^63-1 and 2^62, attempt 2^31, a NUL in tenant or job_id: each is
    dead-lettered with the field named, the legitimate runs of the same partition (one a high
    priority one) succeed, the worker stays up without a traceback, and a second worker of the
    group finds nothing to redo"""
    tenant = f"p{hashlib.sha1(topics.prefix.encode()).hexdigest()[:10]}"
    legit = [
        RunSpec("nightly", handler="it.ok", priority="low"),
        RunSpec("urgent", handler="it.ok", priority="high"),
        RunSpec("other", handler="it.ok", priority="low"),
    ]
    await create_runs(db_dsn, tenant, legit)
    poison = [
        _forged(tenant, scheduled_at=2**63),
        _forged(tenant, scheduled_at=-(2**63) - 1),
        _forged(tenant, scheduled_at=2**62),
        _forged(tenant, attempt=2**31),
        _forged("ac\x00me"),
        _forged(tenant, job_id="nigh\x00tly"),
    ]
    for raw in poison:  # the test's own premise: each is a JSON object of the envelope's shape
        assert json.loads(raw)["v"] == 1
    # All keyed like the legitimate run, so they share its partition and its batches.
    produce(stack.kafka, topics.runs("low"), [(b"nightly", raw) for raw in poison])
    publish(stack.kafka, topics, tenant, legit)
    settings = worker_settings(stack, db_dsn, topics)
    group = worker_group(settings.topic_prefix)
    run_topics = [topics.runs(p) for p in RUN_TOPICS]
    caplog.set_level(logging.WARNING)
    async with running_worker(settings) as worker:
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 3), 30, "legit runs")
        await wait_for(
            lambda: asyncio.sleep(0, committed_total(stack.kafka, group, run_topics) == 9),
            30,
            "every offset committed, the poison's too",
        )
        await asyncio.sleep(1.0)  # a wedged claim loop would log again within this time
        assert worker.metrics.executions.labels("succeeded")._value.get() == 3
    assert _quiet(caplog.records) == []
    warnings = [r for r in caplog.records if r.name == "tickwheel.worker"]
    assert len(warnings) <= len(poison) + 2, [r.getMessage() for r in warnings]
    letters = [UnreadableRun.decode(v) for v in drain_values(stack.kafka, topics.dlq, 6)]
    by_original = {u.original: u.error for u in letters}
    assert set(by_original) == set(poison)
    for raw, needle in zip(
        poison,
        ["scheduled_at", "scheduled_at", "scheduled_at", "attempt", "tenant", "job_id"],
        strict=True,
    ):
        assert needle in by_original[raw], by_original[raw]
    # A restart of the group: nothing is redelivered, nothing dead-lettered again.
    caplog.clear()
    async with running_worker(settings):
        await asyncio.sleep(3.0)
    assert len(drain_values(stack.kafka, topics.dlq, 6)) == 6
    assert _quiet(caplog.records) == []


@pytest.mark.parametrize("size", [780_000, 900_000])
async def test_a_huge_garbage_message_is_dead_lettered_within_one_message(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    caplog: pytest.LogCaptureFixture,
    size: int,
) -> None:
    """hundreds of kilobytes of garbage on a run topic: its dead letter is cut to one message
    with the original's size and SHA-256, the run beside it succeeds, the worker stays up"""
    tenant = f"g{hashlib.sha1(topics.prefix.encode()).hexdigest()[:10]}"
    legit = [RunSpec("beside", handler="it.ok", priority="low")]
    await create_runs(db_dsn, tenant, legit)
    garbage = b"G" * size
    produce(stack.kafka, topics.runs("low"), [(b"beside", garbage)])
    publish(stack.kafka, topics, tenant, legit)
    settings = worker_settings(stack, db_dsn, topics)
    group = worker_group(settings.topic_prefix)
    caplog.set_level(logging.WARNING)
    async with running_worker(settings):
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "the run")
        await wait_for(
            lambda: asyncio.sleep(
                0, committed_total(stack.kafka, group, [topics.runs("low")]) == 2
            ),
            30,
            "both offsets committed",
        )
    assert _quiet(caplog.records) == []
    (raw,) = drain_values(stack.kafka, topics.dlq, 1)
    assert len(raw) <= 1_000_000
    letter = UnreadableRun.decode(raw)
    assert letter.truncated and letter.original_size == size
    assert letter.original_sha256 == hashlib.sha256(garbage).hexdigest()
    assert garbage.startswith(letter.original) and "not JSON" in letter.error
