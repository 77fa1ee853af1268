"""Producing with the broker's confirmation: `publish_confirmed` produces `Outgoing` messages
and waits for their acks, returning those not acknowledged (a full local queue is waited out,
never turned into a drop); `publish_reports` publishes reports of other messages (rejections,
dead letters), each built to fit one message and built smaller when the broker refuses it as
too large. A caller raises `PublishError` for what was not acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple, TypeVar

from confluent_kafka import KafkaException, Producer

log = logging.getLogger("tickwheel.kafka")  # one logger for the package

DELIVERY_TIMEOUT_S = 30.0  # how long a confirmed publish waits for the broker's acks
# librdkafka's default `message.max.bytes`, set explicitly on every producer that writes reports
# of other messages (rejections, dead letters): the size such a report (key, value, headers and
# record overhead) must stay under.
PRODUCER_MESSAGE_MAX_BYTES = 1_000_000
# What a record adds to its key, value and headers in librdkafka's size check (v2 record
# overhead is under 100 bytes); the rest of the margin is slack.
RECORD_OVERHEAD_BYTES = 512
# When the broker refuses a report as too large anyway (a topic's max.message.bytes below our
# producer's), it is sent again built for at most this many bytes: room for the longest
# reason (2,000 characters, 12 KB if every one is JSON-escaped), a key and the original's size
# and digest.
FALLBACK_MESSAGE_BYTES = 32 * 1024
QUEUE_FULL_WAIT_S = 0.1  # producer queue full: serve delivery reports this long, then retry

T = TypeVar("T")


class Outgoing(NamedTuple):
    """One message to produce: topic, key, value, headers and, if given, the record's
    timestamp (unix ms; else the producer's wall clock stamps it) and its partition (else the
    producer's partitioner picks one by key). A named tuple: a leader makes one per run."""

    topic: str
    value: bytes
    key: bytes | str | None = None
    headers: list[tuple[str, str | bytes | None]] | None = None
    timestamp_ms: int | None = None
    partition: int | None = None


class PublishError(RuntimeError):
    """Some messages of a confirmed publish were not acknowledged; `failed` maps index → error."""

    def __init__(self, failed: dict[int, str]) -> None:
        sample = "; ".join(f"#{i}: {e}" for i, e in list(failed.items())[:3])
        super().__init__(f"{len(failed)} message(s) not acknowledged: {sample}")
        self.failed = failed


# For a producer whose messages all go through `publish_confirmed`: delivery reports for
# failures only (a success is known when `flush` drains the queue).
ONLY_ERROR_REPORTS: dict[str, Any] = {"delivery.report.only.error": True}
SERVE_EVERY = 1000  # messages produced between two servings of delivery reports
ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: its partitioner picks, by key


def value_room(max_bytes: int, key: bytes | str | None, headers: Sequence[Any] = ()) -> int:
    """Bytes left for a value beside this key and these headers in a message of `max_bytes`."""
    used = RECORD_OVERHEAD_BYTES + len(key or b"")
    for name, value in headers:
        used += len(name) + len(value or b"")
    return max_bytes - used


def publish_reports(
    producer: Producer,
    items: Sequence[T],
    build: Callable[[T, int], Outgoing],
    max_bytes: int = PRODUCER_MESSAGE_MAX_BYTES,
) -> dict[int, str]:
    """A confirmed publish of reports about other messages (rejections, dead letters), each
    built by `build(item, max_bytes)` to fit one message; those the broker refuses as too large
    (a topic allowing less than our producer) are built again for FALLBACK_MESSAGE_BYTES and
    sent once more. Returns {index: error} as `publish_confirmed` does."""
    failed = publish_confirmed(producer, [build(item, max_bytes) for item in items])
    too_large = [i for i, error in failed.items() if "MSG_SIZE_TOO_LARGE" in error]
    if too_large:
        log.warning("%d report(s) refused as too large; resending cut", len(too_large))
        again = publish_confirmed(
            producer, [build(items[i], FALLBACK_MESSAGE_BYTES) for i in too_large]
        )
        failed = {i: e for i, e in failed.items() if i not in too_large}
        failed.update({too_large[j]: error for j, error in again.items()})
    return failed


def publish_confirmed(
    producer: Producer,
    messages: Sequence[Outgoing],
    timeout_s: float = DELIVERY_TIMEOUT_S,
    distinct_values: bool = False,
) -> dict[int, str]:
    """Produce `messages` and wait for the broker's acks; blocking (call it off the loop).

    Returns {index: error} of the messages that were not acknowledged (refused, too large, or
    still unacknowledged after `timeout_s`); empty when all landed. A full local queue is
    waited out, never turned into a drop.

    `distinct_values`: no two messages have the same value (run envelopes, each naming its
    run), so a delivery report is matched to its message by the value it carries, and every
    message shares one callback instead of one made for it (a leader publishes every run of a
    hot second).
    """
    failed: dict[int, str] = {}
    acked: set[int] = set()
    by_value: dict[bytes, str | None] = {}  # distinct_values: value → error (None: acked)

    def on_delivery(index: int, err: Any, _msg: Any) -> None:
        if err is None:
            acked.add(index)
        else:
            failed[index] = str(err)

    def on_delivery_of_value(err: Any, msg: Any) -> None:
        by_value[msg.value() or b""] = None if err is None else str(err)

    deadline = time.monotonic() + timeout_s
    for index, out in enumerate(messages):
        while True:
            try:
                producer.produce(
                    out.topic,
                    key=out.key,
                    value=out.value,
                    headers=out.headers,
                    on_delivery=(
                        on_delivery_of_value if distinct_values else partial(on_delivery, index)
                    ),
                    # 0 is librdkafka's "now, by this host's wall clock"
                    timestamp=out.timestamp_ms or 0,
                    partition=ANY_PARTITION if out.partition is None else out.partition,
                )
                break
            except BufferError:
                if time.monotonic() > deadline:
                    failed[index] = "local producer queue full"
                    break
                producer.poll(QUEUE_FULL_WAIT_S)
            except KafkaException as exc:  # e.g. MSG_SIZE_TOO_LARGE, refused before sending
                failed[index] = str(exc.args[0])
                break
        if index % SERVE_EVERY == SERVE_EVERY - 1:
            producer.poll(0)  # serve delivery reports now and then, not per message
    drained = producer.flush(max(0.0, deadline - time.monotonic())) == 0
    if by_value:  # reports matched by value (rare with ONLY_ERROR_REPORTS: failures only)
        for index, out in enumerate(messages):
            if out.value in by_value:
                error = by_value[out.value]
                if error is None:
                    acked.add(index)
                else:
                    failed.setdefault(index, error)
    if drained:
        # The queue drained: every message was acknowledged or reported failed. A producer
        # made with ONLY_ERROR_REPORTS reports failures only, which spares it a delivery
        # report per message (~4 µs of a scheduler's CPU per run).
        return failed
    for index in range(len(messages)):  # some still queued: only reported acks count
        if index not in acked and index not in failed:
            failed[index] = f"not acknowledged within {timeout_s:.0f}s"
    return failed
