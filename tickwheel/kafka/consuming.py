"""`BatchConsumer`: a group consumer driven from asyncio code — batches in, lingering to fill
them; offsets stored explicitly, only after the batch's database write landed (DESIGN I5);
a rewind after a failed write. Every confluent-kafka call runs on one I/O thread of its own;
the loop's discipline is in the class's docstring.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

log = logging.getLogger("tickwheel.kafka")  # one logger for the package

POLL_TIMEOUT_S = 0.5  # how long one `batch()` waits for a first message
# After the first message arrives, keep collecting for up to this long to fill the batch: a
# database transaction per few messages would cost more than the wait.
BATCH_LINGER_S = 0.05

T = TypeVar("T")


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
