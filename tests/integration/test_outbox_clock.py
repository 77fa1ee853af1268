"""A leader's envelopes carry the leaders' clock as their record timestamp, not the wall clock
of the host that produced them: the worker records that stamp as the run's published_at, so a
scheduler host whose clock is stepped cannot make the ledger say a run went out early."""

from __future__ import annotations

import asyncio

import pytest

from tickwheel.clock import now_ms
from tickwheel.domain import Priority
from tickwheel.kafka.clients import producer
from tickwheel.shards.outbox import Outbox
from tickwheel.shards.store import Dead, Dispatch
from tickwheel.stack import Addresses
from tickwheel.testing import drain
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration


async def test_envelopes_and_dead_letters_are_stamped_by_the_leaders_clock(
    stack: Addresses, topics: Topics
) -> None:
    """with the leaders' clock 45 s behind this host's, a published envelope and a dead letter
    both carry the leaders' instant as their Kafka timestamp"""
    leaders_ms = now_ms() - 45_000
    outbox = Outbox([producer(stack.kafka)], topics, lambda: leaders_ms)
    run = Dispatch("t", "j", leaders_ms, 1, Priority.NORMAL, "h", None, "{}", 1000)
    try:
        acked = await outbox.publish([run], epoch=3, shard=0)
        await outbox.publish_dead([Dead(run, 3, "lease lapsed", leaders_ms)])
    finally:
        await asyncio.get_running_loop().run_in_executor(None, outbox.close)
    assert acked == [run]
    envelope = drain(stack.kafka, topics.runs(Priority.NORMAL), expect=1)
    letter = drain(stack.kafka, topics.dlq, expect=1)
    assert [m.timestamp()[1] for m in envelope] == [leaders_ms]
    assert [m.timestamp()[1] for m in letter] == [leaders_ms]
