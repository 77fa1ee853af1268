"""A confirmed publish on the real broker, with a producer that reports failures only (the
scheduler's): what it calls acknowledged is on the topic, what the broker refused is named,
and a publish that cannot drain in time acknowledges nothing."""

from __future__ import annotations

import os

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from tickwheel.kafka.clients import producer
from tickwheel.kafka.producing import ONLY_ERROR_REPORTS, Outgoing, publish_confirmed
from tickwheel.stack import Addresses
from tickwheel.testing import read_topic
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration


@pytest.mark.foreign_messages("runs.normal", "runs.low")
@pytest.mark.parametrize("distinct", [False, True], ids=["per-message", "by-value"])
def test_acknowledged_messages_are_on_the_topic_and_a_refused_one_is_named(
    topics: Topics, stack: Addresses, distinct: bool
) -> None:
    """five messages and one the broker refuses (larger than its topic allows; another topic,
    since the broker refuses a whole batch): the five are acknowledged and read back, the
    refused one is the only failure, with the broker's reason (from its delivery report, the
    only kind this producer sends) — matched to its message by a callback of its own, or, for
    distinct values (run envelopes), by the value the report carries"""
    topic, small = topics.runs("normal"), topics.runs("low")
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    entry = ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
    limit = ConfigResource("topic", small, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([limit]).values():
        future.result(30)
    prod = producer(stack.kafka, **ONLY_ERROR_REPORTS, **{"linger.ms": 0})
    out = [Outgoing(topic, value=f"m{i}".encode(), key=f"k{i}") for i in range(5)]
    out.insert(2, Outgoing(small, value=os.urandom(20_000), key="big"))  # lz4 cannot shrink it
    failed = publish_confirmed(prod, out, distinct_values=distinct)
    assert list(failed) == [2] and "MSG_SIZE_TOO_LARGE" in failed[2]
    values = sorted(m.value() for m in read_topic(stack.kafka, topic))
    assert values == [f"m{i}".encode() for i in range(5)]


@pytest.mark.parametrize("distinct", [False, True], ids=["per-message", "by-value"])
def test_a_publish_that_cannot_drain_acknowledges_nothing(distinct: bool) -> None:
    """no broker answers: after the timeout every message is unacknowledged (none is taken for
    delivered because no failure was reported for it)"""
    prod = producer("127.0.0.1:9", **ONLY_ERROR_REPORTS, **{"message.timeout.ms": 60_000})
    out = [Outgoing("nowhere", value=f"v{i}".encode(), key=f"k{i}") for i in range(3)]
    failed = publish_confirmed(prod, out, timeout_s=1.0, distinct_values=distinct)
    assert sorted(failed) == [0, 1, 2]
    assert all("not acknowledged" in e for e in failed.values())
