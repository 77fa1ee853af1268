"""What is asked of the Kafka broker directly, outside a produce or consume loop: topics
created (idempotently) and deleted, and the probes — a health `round_trip` through one
partition, the start, end and committed offsets of a group's topics (`topic_offsets`), a
group's members (`group_members`). Every call blocks (call it off the event loop) and a failure
is the exception it raises.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tickwheel.kafka.clients import QUIET, admin_client, consumer, producer

TOPIC_CREATE_TIMEOUT_S = 30.0


def create_topics(
    bootstrap: str, names: Iterable[str], partitions: int, replication: int
) -> list[str]:
    """Create the topics that do not exist yet; return the names created. Idempotent."""
    admin = admin_client(bootstrap)
    existing = set(admin.list_topics(timeout=TOPIC_CREATE_TIMEOUT_S).topics)
    wanted = [n for n in dict.fromkeys(names) if n not in existing]
    if not wanted:
        return []
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=replication) for n in wanted],
        operation_timeout=TOPIC_CREATE_TIMEOUT_S,
        request_timeout=TOPIC_CREATE_TIMEOUT_S,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # lost a race: fine
                raise
    return created


def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    admin = admin_client(bootstrap)
    futures = admin.delete_topics(list(names), operation_timeout=TOPIC_CREATE_TIMEOUT_S)
    for future in futures.values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise


def round_trip(bootstrap: str, topic: str, timeout_s: float = 30.0) -> float:
    """Produce one message to partition 0 of `topic` and consume it back; return seconds.

    A health probe: its clients are quiet, a failure is the exception it raises (while the
    broker boots, the idempotent producer would otherwise log each retry of its PID request).
    """
    started = time.monotonic()
    token = uuid.uuid4().bytes
    prod = producer(bootstrap, **{"linger.ms": 0}, **QUIET)
    delivered: list[tuple[int, int]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered.append((msg.partition(), msg.offset()))

    prod.produce(topic, value=token, partition=0, on_delivery=on_delivery)
    if prod.flush(timeout_s) != 0 or not delivered:
        raise TimeoutError(f"produce to {topic} was not acknowledged within {timeout_s}s")
    partition, offset = delivered[0]
    cons = consumer(bootstrap, f"health-{uuid.uuid4()}", **{"enable.auto.commit": False}, **QUIET)
    try:
        cons.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            if msg.value() == token:
                return time.monotonic() - started
        raise TimeoutError(f"message produced to {topic} not consumed back within {timeout_s}s")
    finally:
        cons.close()


def topic_offsets(
    probe: Consumer, topics: Sequence[str], timeout_s: float
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Per partition of `topics`: its start, its end, and the probe's group's committed offset
    (where one was committed), asked of the broker. `probe` is a consumer of the group that
    never subscribes (so it never joins): a consumer whose coordinator connection is stuck
    would wait on these calls as it waits on its rejoin. Blocking; raises KafkaException."""
    parts = [
        TopicPartition(name, n)
        for name in topics
        for n in sorted(probe.list_topics(name, timeout=timeout_s).topics[name].partitions)
    ]
    starts, ends = {}, {}
    for tp in parts:
        starts[tp.topic, tp.partition], ends[tp.topic, tp.partition] = probe.get_watermark_offsets(
            tp, timeout=timeout_s, cached=False
        )
    committed = {
        (tp.topic, tp.partition): tp.offset
        for tp in probe.committed(parts, timeout=timeout_s)
        if tp.offset >= 0
    }
    return starts, ends, committed


def group_members(admin: AdminClient, group: str, timeout_s: float) -> frozenset[str]:
    """The client ids of `group`'s members, asked of its coordinator. Blocking; raises
    KafkaException."""
    future = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
    return frozenset(member.client_id for member in future.result(timeout=timeout_s).members)
