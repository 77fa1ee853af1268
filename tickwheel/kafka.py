"""Kafka plumbing: idempotent producers, offset-storing consumers, topic creation.

Delivery contract used everywhere (DESIGN I5): consumers run with `enable.auto.offset.store`
off and auto-commit on. Code stores an offset (`store_offsets`) only after the message's
database write landed; the client commits stored offsets in the background. Offsets are thus
never committed per message synchronously, and never ahead of the database.

Every client logs through Python logging (logger `tickwheel.librdkafka`, JSON lines in our
processes) rather than librdkafka writing `%4|…|` lines to stderr on its own.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

log = logging.getLogger("tickwheel.kafka")

AUTO_COMMIT_INTERVAL_MS = 1000
TOPIC_CREATE_TIMEOUT_S = 30.0
POLL_TIMEOUT_S = 0.5  # how long one `batch()` waits for a first message
# After the first message arrives, keep collecting for up to this long to fill the batch: a
# database transaction per few messages would cost more than the wait.
BATCH_LINGER_S = 0.05
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


# --- the batch loop's parts: a consumer driven from asyncio, and a confirmed publish ---------


class BatchConsumer:
    """A group consumer for asyncio code: batches in, offsets stored explicitly (I5).

    confluent-kafka's calls block, and a consumer must be used from one thread, so every call
    goes through one I/O thread of our own. The discipline every Kafka → Postgres loop follows:

        messages = await c.batch()          # up to `batch_size`, lingering to fill the batch
        ... write to the database ...
        await c.store_offsets(messages)     # only after the write landed; committed in the
                                            # background, never per message synchronously
        (on a failed write: await c.rewind(messages) and retry them after a back-off)

    Consumer errors: end-of-partition is dropped; a fatal error raises `KafkaException` (the
    process's runner then stops the process); other errors are transient (librdkafka retries
    by itself) and are logged, never raised into the loop.
    """

    def __init__(
        self,
        consumer: Consumer,
        topics: Sequence[str],
        batch_size: int,
        *,
        linger_s: float = BATCH_LINGER_S,
        poll_timeout_s: float = POLL_TIMEOUT_S,
        on_assign: Callable[[Consumer, list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[Consumer, list[TopicPartition]], None] | None = None,
        name: str = "kafka",
    ) -> None:
        self.consumer = consumer
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.poll_timeout_s = poll_timeout_s
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-io")
        hooks: dict[str, Any] = {}
        if on_assign is not None:
            hooks["on_assign"] = on_assign
        if on_revoke is not None:
            hooks["on_revoke"] = on_revoke
        # Rebalance callbacks run inside consume(), hence on the I/O thread too.
        self._io.submit(consumer.subscribe, list(topics), **hooks).result()
        self.last_batch_at: float | None = None  # time.time() of the last non-empty batch

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the I/O thread (pause, resume, assignment, ...)."""
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def batch(self) -> list[Message]:
        """The next messages (possibly none after `poll_timeout_s`), errors filtered out."""
        messages = await self.call(self._consume)
        if messages:
            self.last_batch_at = time.time()
        return messages

    async def store_offsets(self, messages: Sequence[Message]) -> None:
        """Mark `messages` done: each partition's offset moves past its highest message."""
        await self.call(self._store, messages)

    async def rewind(self, messages: Sequence[Message]) -> None:
        """Seek each partition back to its first message in `messages`, to consume them again."""
        await self.call(self._rewind, messages)

    async def store_positions(self, positions: dict[tuple[str, int], int]) -> None:
        """Store explicit next-offsets per (topic, partition), e.g. from `ContiguousOffsets`."""
        if positions:
            await self.call(self._store_positions, positions)

    async def assignment(self) -> list[TopicPartition]:
        result: list[TopicPartition] = await self.call(self.consumer.assignment)
        return result

    async def holding(self) -> tuple[frozenset[tuple[str, int]], dict[tuple[str, int], int]]:
        """The partitions this consumer holds and its position in each (known ones): local
        state, no broker round trip, so a sample never keeps the I/O thread from `consume()`
        — which serves the group's rebalances — for longer than one `batch()`."""
        return await self.call(self._holding)

    async def close(self) -> None:
        """Commit the stored offsets (and only those), leave the group, stop the I/O thread."""
        await self.call(self.consumer.close)
        self._io.shutdown(wait=True)

    # On the I/O thread ---------------------------------------------------------------------

    def _consume(self) -> list[Message]:
        raw: list[Message] = self.consumer.consume(self.batch_size, self.poll_timeout_s)
        deadline = time.monotonic() + self.linger_s
        while raw and len(raw) < self.batch_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            more = self.consumer.consume(self.batch_size - len(raw), left)
            if not more:
                break
            raw.extend(more)
        return [m for m in raw if _usable(m)]

    def _holding(self) -> tuple[frozenset[tuple[str, int]], dict[tuple[str, int], int]]:
        held = self.consumer.assignment()
        positions = self.consumer.position(held) if held else []
        return (
            frozenset((tp.topic, tp.partition) for tp in held),
            {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0},
        )

    def _store(self, messages: Sequence[Message]) -> None:
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in _edges(messages, max).items()]
        if offsets:
            try:
                self.consumer.store_offsets(offsets=offsets)
            except KafkaException:
                # The partition was revoked meanwhile; its new owner redelivers from the last
                # committed offset, and every loop's database write is idempotent for that.
                log.warning("could not store offsets (partition revoked?)", exc_info=True)

    def _store_positions(self, positions: dict[tuple[str, int], int]) -> None:
        for (topic, partition), offset in positions.items():
            try:
                self.consumer.store_offsets(offsets=[TopicPartition(topic, partition, offset)])
            except KafkaException:
                # Revoked meanwhile: its new owner redelivers from the last committed offset.
                log.warning("could not store the offset of %s[%d]", topic, partition)

    def _rewind(self, messages: Sequence[Message]) -> None:
        for (topic, partition), offset in _edges(messages, min).items():
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException:
                log.warning("could not rewind %s[%d]", topic, partition, exc_info=True)


def _usable(msg: Message) -> bool:
    err = msg.error()
    if err is None:
        return True
    if err.code() == KafkaError._PARTITION_EOF:
        return False
    if err.fatal():
        raise KafkaException(err)
    log.warning("consumer error (transient, librdkafka retries): %s", err)
    return False


def _edges(
    messages: Sequence[Message], pick: Callable[[int, int], int]
) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the lowest (pick=min) or highest (pick=max) offset."""
    edges: dict[tuple[str, int], int] = {}
    for msg in messages:
        key = (msg.topic() or "", msg.partition() or 0)
        offset = msg.offset() or 0
        edges[key] = pick(edges.get(key, offset), offset)
    return edges


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


class ContiguousOffsets:
    """Per partition, the next offset that may be committed when messages finish out of order.

    A loop that works on many messages of a partition at once (a worker runs them
    concurrently) may finish offset 7 before offset 5. The committed offset must never pass a
    message whose work has not landed (I5), so per partition this keeps the offsets handed out
    and not yet done; the committable position is the lowest of them, or one past the highest
    handed out when none is outstanding.

        gen = offsets.track(tp, offset)      # when the message is received
        offsets.done(tp, offset, gen)        # when its database write (and DLQ publish) landed
        positions = offsets.advanced()       # {tp: next offset} that moved since the last call

    A partition's entry lives from its first tracked message (or `assign`) until `revoke`;
    `track` returns the entry's generation, and a `done` with an older generation (the
    partition was revoked, perhaps assigned back since) is ignored: the offsets it speaks of
    belong to the partition's previous owner period. Thread-safe: a rebalance callback runs on
    the consumer's I/O thread while the loop marks messages done on its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], _PartitionOffsets] = {}
        self._generation = 0

    def assign(self, tp: tuple[str, int]) -> int:
        with self._lock:
            return self._entry(tp).generation

    def track(self, tp: tuple[str, int], offset: int) -> int:
        return self.track_many(tp, (offset,))

    def track_many(self, tp: tuple[str, int], offsets: Iterable[int]) -> int:
        """`track` for several offsets of one partition (one lock for a fetched batch)."""
        with self._lock:
            part = self._entry(tp)
            pending, heap = part.pending, part.outstanding
            for offset in offsets:
                if offset not in pending:  # a redelivery of an offset still outstanding
                    pending.add(offset)
                    heapq.heappush(heap, offset)
                if offset >= part.next:
                    part.next = offset + 1
            return part.generation

    def done(self, tp: tuple[str, int], offset: int, generation: int) -> None:
        self.done_many(((tp, offset, generation),))

    def done_many(self, items: Iterable[tuple[tuple[str, int], int, int]]) -> None:
        """`done` for several (tp, offset, generation) at once (one lock for a settled batch)."""
        parts = self._parts
        with self._lock:
            for tp, offset, generation in items:
                part = parts.get(tp)
                if part is not None and part.generation == generation and offset in part.pending:
                    part.finished.add(offset)

    def generation(self, tp: tuple[str, int]) -> int | None:
        """The current generation of `tp`, or None when it is not assigned."""
        with self._lock:
            part = self._parts.get(tp)
            return None if part is None else part.generation

    def position(self, tp: tuple[str, int]) -> int | None:
        """The next offset to commit for `tp` (None: nothing tracked yet)."""
        with self._lock:
            part = self._parts.get(tp)
            return None if part is None else part.position()

    def advanced(self) -> dict[tuple[str, int], int]:
        """{tp: next offset} of the partitions whose position moved since the last call."""
        moved: dict[tuple[str, int], int] = {}
        with self._lock:
            for tp, part in self._parts.items():
                position = part.position()
                if position is not None and position != part.reported:
                    part.reported = position
                    moved[tp] = position
        return moved

    def revoke(self, tp: tuple[str, int]) -> int | None:
        """Forget `tp`; return its final committable position (None: nothing tracked)."""
        with self._lock:
            part = self._parts.pop(tp, None)
            return None if part is None else part.position()

    def outstanding(self) -> int:
        """Messages handed out and not done, over all partitions."""
        with self._lock:
            return sum(len(p.outstanding) - len(p.finished) for p in self._parts.values())

    def _entry(self, tp: tuple[str, int]) -> _PartitionOffsets:
        part = self._parts.get(tp)
        if part is None:
            self._generation += 1
            part = self._parts[tp] = _PartitionOffsets(self._generation)
        return part


class _PartitionOffsets:
    __slots__ = ("finished", "generation", "next", "outstanding", "pending", "reported")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.outstanding: list[int] = []  # min-heap of offsets handed out, done ones included
        self.pending: set[int] = set()  # the same offsets, for membership
        self.finished: set[int] = set()  # done, still in the heap until they reach its top
        self.next = -1  # one past the highest offset handed out; -1: none yet
        self.reported: int | None = None

    def position(self) -> int | None:
        heap = self.outstanding
        while heap and heap[0] in self.finished:
            offset = heapq.heappop(heap)
            self.finished.discard(offset)
            self.pending.discard(offset)
        if heap:
            return heap[0]
        return None if self.next < 0 else self.next


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
