"""The Kafka clients every process makes, configured for the package's delivery contract
(DESIGN I5): `producer` is idempotent; `consumer` stores offsets only through explicit
`store_offsets` and commits them in the background; `admin_client`. Each logs through the
`tickwheel.librdkafka` logger; `QUIET` silences the clients of a probe.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

AUTO_COMMIT_INTERVAL_MS = 1000

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
