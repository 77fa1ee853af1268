"""Reading the dead-letter topic `<prefix>.runs.dlq` without joining or moving a consumer group.

`read_dead_letters` is a one-shot scan, not a loop:

1. the topic's metadata, with a short timeout (the `ops_kafka_timeout_s` setting): an
   unreachable broker is one sentence, not a hang;
2. per partition, the high watermark *now* and the first offset to read: the beginning, or
   with `since_ms` the first message stamped at or after `since_ms - CLOCK_SKEW_MS`;
3. the partitions are *assigned* directly: no subscribe, so no group join and no rebalance;
   auto commit is off and the group id is a throwaway one never committed to, so no consumer
   group is created, joined or moved;
4. messages are read up to the watermarks of step 2, then the scan stops; a message that is
   not a dead letter is reported as `Malformed` (partition, offset, reason), never fatal.

Selection (`select`, pure) is what `dlq ls` shows and `dlq replay` replays, so the two always
agree: one entry per run key — its latest dead letter (a run replayed and dead again has
several) — filtered, oldest death first, cut at `limit`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tickwheel.cli_support import Unavailable
from tickwheel.clock import format_ms
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.kafka.clients import QUIET, consumer

# The DLQ publisher stamps a message when it produces it; `dead_at` may come from another
# clock (the worker's or the database's). Seeking this far before `since` and then filtering
# on `dead_at` itself keeps skew from hiding a letter.
CLOCK_SKEW_MS = 5 * 60 * 1000
POLL_S = 0.2  # one consume() wait, seconds
CONSUME_BATCH = 500  # messages per consume() call


@dataclass(frozen=True)
class Letter:
    """One dead letter and where it lies on the topic."""

    partition: int
    offset: int
    dead: DeadLetter

    @property
    def run_key(self) -> str:
        return self.dead.run.run_key

    def to_json(self) -> dict[str, Any]:
        return {
            "run_key": self.run_key,
            "tenant": self.dead.run.tenant,
            "job_id": self.dead.run.job_id,
            "scheduled_at": format_ms(self.dead.run.scheduled_at),
            "dead_at": format_ms(self.dead.dead_at),
            "attempts": self.dead.attempts,
            "error": self.dead.error,
            "partition": self.partition,
            "offset": self.offset,
        }


@dataclass(frozen=True)
class Malformed:
    """A message on the DLQ topic that is not a dead letter."""

    partition: int
    offset: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "offset": self.offset, "reason": self.reason}


@dataclass(frozen=True)
class DlqFilter:
    """The filters `dlq ls` and `dlq replay` share. None leaves a filter out."""

    since_ms: int | None = None  # dead at or after, unix ms
    job_id: str | None = None
    tenant: str | None = None
    error: str | None = None  # a substring of the error, case-insensitive
    limit: int | None = None

    def matches(self, letter: Letter) -> bool:
        dead, run = letter.dead, letter.dead.run
        return (
            (self.since_ms is None or dead.dead_at >= self.since_ms)
            and (self.job_id is None or run.job_id == self.job_id)
            and (self.tenant is None or run.tenant == self.tenant)
            and (self.error is None or self.error.casefold() in dead.error.casefold())
        )

    def to_json(self) -> dict[str, Any]:
        """The filters as given, for output and the replay audit."""
        return {
            "since": None if self.since_ms is None else format_ms(self.since_ms),
            "job": self.job_id,
            "tenant": self.tenant,
            "error": self.error,
            "limit": self.limit,
        }


def _order(letter: Letter) -> tuple[int, int, int]:
    return (letter.dead.dead_at, letter.partition, letter.offset)


def select(letters: Iterable[Letter], flt: DlqFilter) -> list[Letter]:
    """The latest letter of each run key, those matching `flt`, oldest death first, cut."""
    latest: dict[str, Letter] = {}
    for letter in letters:
        seen = latest.get(letter.run_key)
        if seen is None or _order(letter) > _order(seen):
            latest[letter.run_key] = letter
    chosen = sorted((x for x in latest.values() if flt.matches(x)), key=_order)
    return chosen if flt.limit is None else chosen[: flt.limit]


def _silent(bootstrap: str, timeout_s: float) -> str:
    return f"Kafka at {bootstrap} did not answer within {timeout_s:g} s"


def _kafka_failure(bootstrap: str, exc: KafkaException, timeout_s: float) -> str:
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return f"Kafka at {bootstrap} failed: {exc}"
    if err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        return f"{_silent(bootstrap, timeout_s)} ({err.str()})"
    return f"Kafka at {bootstrap} refused: {err.str()}"


def read_dead_letters(
    bootstrap: str, topic: str, *, timeout_s: float, since_ms: int | None = None
) -> tuple[list[Letter], list[Malformed]]:
    """Every dead letter on `topic` now (from `since_ms - CLOCK_SKEW_MS` if given); blocking.

    `timeout_s` bounds every wait for the broker (metadata, offsets, a read making no
    progress); past it, `Unavailable` says so.
    """
    reader = consumer(
        bootstrap,
        f"tickwheel-dlq-reader-{uuid.uuid4()}",  # never joined, never committed to
        **{"enable.auto.commit": False, "enable.partition.eof": True},
        **QUIET,  # librdkafka's connection lines would bury our one-line error
    )
    try:
        starts = _start_offsets(reader, bootstrap, topic, since_ms, timeout_s)
        return _read(reader, bootstrap, topic, starts, timeout_s)
    except KafkaException as exc:
        raise Unavailable(_kafka_failure(bootstrap, exc, timeout_s)) from None
    finally:
        reader.close()


def _start_offsets(
    reader: Consumer, bootstrap: str, topic: str, since_ms: int | None, timeout_s: float
) -> dict[int, tuple[int, int]]:
    """{partition: (first offset to read, high watermark)} of the partitions with work."""
    meta = reader.list_topics(topic, timeout=timeout_s)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        raise Unavailable(
            f"topic {topic} does not exist on Kafka at {bootstrap} "
            "(wrong TICKWHEEL_TOPIC_PREFIX, or run `tickwheel topics create`)"
        )
    ranges: dict[int, tuple[int, int]] = {}
    for partition in sorted(found.partitions):
        low, high = reader.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s, cached=False
        )
        ranges[partition] = (low, high)
    if since_ms is not None and ranges:
        stamp = max(0, since_ms - CLOCK_SKEW_MS)
        asked = [TopicPartition(topic, p, stamp) for p in ranges]
        for tp in reader.offsets_for_times(asked, timeout=timeout_s):
            if tp.error is not None:  # never guess a start: that could hide dead letters
                raise KafkaException(tp.error)
            low, high = ranges[tp.partition]
            # -1: no message stamped at or after `stamp` on this partition.
            ranges[tp.partition] = (high if tp.offset < 0 else max(low, tp.offset), high)
    return {p: r for p, r in ranges.items() if r[0] < r[1]}


def _read(
    reader: Consumer,
    bootstrap: str,
    topic: str,
    starts: dict[int, tuple[int, int]],
    timeout_s: float,
) -> tuple[list[Letter], list[Malformed]]:
    letters: list[Letter] = []
    malformed: list[Malformed] = []
    if not starts:
        return letters, malformed
    reader.assign([TopicPartition(topic, p, first) for p, (first, _) in starts.items()])
    remaining = set(starts)
    last_progress = time.monotonic()
    while remaining:
        if time.monotonic() - last_progress > timeout_s:
            raise Unavailable(f"{_silent(bootstrap, timeout_s)} while reading {topic}")
        for msg in reader.consume(CONSUME_BATCH, POLL_S):
            partition, offset, err = msg.partition(), msg.offset(), msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(partition)
                elif err.fatal():
                    raise KafkaException(err)
                continue  # transient: librdkafka retries by itself (and it is no progress)
            if partition is None or offset is None:  # set on every message; for the checker
                continue
            last_progress = time.monotonic()
            high = starts[partition][1]
            if offset >= high:  # written after the scan began: not ours to read
                remaining.discard(partition)
                continue
            try:
                letters.append(Letter(partition, offset, DeadLetter.decode(msg.value() or b"")))
            except EnvelopeError as exc:
                malformed.append(Malformed(partition, offset, str(exc)))
            if offset >= high - 1:
                remaining.discard(partition)
    return letters, malformed
