"""Kafka plumbing: idempotent producers, offset-storing consumers, topic creation.

Delivery contract used everywhere (DESIGN I5): consumers run with `enable.auto.offset.store`
off and auto-commit on. Code stores an offset (`store_offsets`) only after the message's
database write landed; the client commits stored offsets in the background. Offsets are thus
never committed per message synchronously, and never ahead of the database.

Every client logs through Python logging (logger `tickwheel.librdkafka`, JSON lines in our
processes) rather than librdkafka writing `%4|…|` lines to stderr on its own.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

AUTO_COMMIT_INTERVAL_MS = 1000
TOPIC_CREATE_TIMEOUT_S = 30.0

# confluent-kafka maps librdkafka's syslog levels onto logging's (0-2 → CRITICAL, 3 → ERROR,
# 4 → WARNING, 5-6 → INFO, 7 → DEBUG) and hands the lines over from poll()/flush(), on the
# polling thread, so a client nobody polls queues its lines instead of printing them.
LIBRDKAFKA_LOGGER = logging.getLogger("tickwheel.librdkafka")
# A probe reports one reason of its own; librdkafka's lines would only repeat it.
QUIET: dict[str, Any] = {"log_level": 0}


def producer(bootstrap: str, **overrides: Any) -> Producer:
    """An idempotent producer: acks=all, no reordering or duplicates on retry."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": LIBRDKAFKA_LOGGER,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": "lz4",
        # Hot seconds publish in bursts: give batches a few ms to fill.
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    config.update(overrides)
    return Producer(config)


def consumer(bootstrap: str, group_id: str, **overrides: Any) -> Consumer:
    """A group consumer whose offsets advance only through explicit `store_offsets`."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": LIBRDKAFKA_LOGGER,
        "group.id": group_id,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": AUTO_COMMIT_INTERVAL_MS,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "cooperative-sticky",
    }
    config.update(overrides)
    return Consumer(config)


def admin_client(bootstrap: str, quiet: bool = False) -> AdminClient:
    """`quiet`: no librdkafka log lines (a health probe reports one reason of its own)."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA_LOGGER}
    if quiet:
        config.update(QUIET)
    return AdminClient(config)


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
