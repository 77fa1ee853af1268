"""The worker's `fetch` part: the run topics' consumer, and what becomes of each message.

It polls the three run topics without pause (so a long handler never pushes the consumer past
max.poll.interval.ms) and, per fetched batch (step 1 of `workers/service.py`): tracks every
offset as outstanding (`ContiguousOffsets`, nothing stored yet), decodes each envelope into the
local queue of its priority level, noting whether its seal opens (tickwheel/run_seal.py), and
hands a message that is no valid envelope to the DLQ (never executed). A level's partitions are
paused while its queue holds `worker_queue_per_priority` deliveries, resumed at half of it.

A delivery is *suspect* — it may not be the first delivery of a fresh claim, so it is claimed
before it runs (I4) — when its seal does not open; when a leader sent it again (header `again`:
a publish not acknowledged, a takeover's adoption, a lapsed lease); when it lies below the end
its partition had when this worker was given the partition (a previous owner may have started
it and died, or stopped past its session; the end is asked of the broker after the
assignment, and until it answers every delivery of the partition is suspect); or when it
arrives so late after it was produced (`late_ms`) that the leader's lease may have lapsed and
the run been sent again. Every other delivery starts without a write.

The consumer's rebalance callbacks run on its I/O thread: an assignment starts a partition's
generation (its end is read then, off that thread); a revocation hands
the partitions to `release` (the worker marks the runs of those partitions it holds as running,
then revokes their offsets), commits each partition's done position at once (its next owner
starts there) and drops the deliveries of the partition still queued.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from tickwheel import broken
from tickwheel.domain import INSTANT_MAX_MS, INSTANT_MIN_MS, PRIORITIES
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.run import AGAIN_HEADER, RunEnvelope
from tickwheel.kafka.consuming import BatchConsumer
from tickwheel.kafka.offsets import ContiguousOffsets
from tickwheel.run_seal import RunSeal
from tickwheel.topics import Topics
from tickwheel.workers.deliveries import Delivery, Queues
from tickwheel.workers.metrics import WorkerMetrics

log = logging.getLogger("tickwheel.worker")

FETCH_POLL_S = 0.05  # seconds one fetch waits for messages
ENDS_RETRY_S = 1.0  # seconds before the ends are asked again after a failed or partial read
READ_ENDS_TIMEOUT_S = 5.0  # seconds the broker has to answer a read of partitions' ends
LAG_EVERY_S = 1.0  # seconds between per-partition lag reports (cached watermarks: cheap)

# (partition, offset, generation, the message's bytes, why): a message for the DLQ.
DeadLetterFn = Callable[[tuple[str, int], int, int, bytes, str], None]
# Partitions taken away → each one's done position to commit (None: nothing done).
ReleaseFn = Callable[[list[tuple[str, int]]], "dict[tuple[str, int], int | None]"]
# Partitions → their end offsets as the broker has them now (those it answered for).
ReadEndsFn = Callable[[list[tuple[str, int]]], "dict[tuple[str, int], int]"]


class Fetcher:
    def __init__(
        self,
        consumer: Consumer,
        topics: Topics,
        *,
        batch_size: int,
        queue_cap: int,
        offsets: ContiguousOffsets,
        queues: Queues,
        metrics: WorkerMetrics,
        dead_letter: DeadLetterFn,
        run_seal: RunSeal | None = None,
        late_ms: int | None = None,
        release: ReleaseFn | None = None,
        read_ends: ReadEndsFn | None = None,
    ) -> None:
        """`late_ms`: a delivery produced this long ago is suspect (None: never for its age).
        `release`: what a revocation calls, on the consumer's thread (None: the partitions'
        offsets are revoked, nothing else). `read_ends`: the end offsets of partitions, asked
        of the broker (blocking; None: never read, every delivery stays suspect)."""
        self.late_ms = late_ms
        self.release = release
        self.read_ends = read_ends
        # Per partition, the end offset it had when it was assigned: a delivery below it may
        # have been started by the previous owner (None: unknown, every delivery is suspect).
        self.assigned_end: dict[tuple[str, int], int | None] = {}
        self._ends_unknown: set[tuple[str, int]] = set()
        # Per partition, which assignment it is in (an end read before a later assignment of the
        # same partition is not its end), and the read of the ends under way.
        self._assignment_of: dict[tuple[str, int], int] = {}
        self._assignments = itertools.count()
        self._ends_task: asyncio.Task[None] | None = None
        self._ends_retry_at = 0.0
        self.topics = topics
        self.run_seal = run_seal
        self.level_of = {topics.runs(p): p for p in PRIORITIES}
        self.queue_cap = queue_cap
        self.offsets = offsets
        self.queues = queues
        self.metrics = metrics
        self.dead_letter = dead_letter
        self.paused: set[str] = set()
        self._assignment_changed = False
        self._revoked = False
        self._lag_labels: set[tuple[str, str]] = set()
        self.source = BatchConsumer(
            consumer,
            list(self.level_of),
            batch_size,
            # librdkafka's consume waits for a full batch or the timeout: a short timeout and
            # no linger hand over what arrived at once, so a fast worker's queues never wait
            # half a second for the next fetch while it has slots free.
            poll_timeout_s=FETCH_POLL_S,
            linger_s=0.0,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            name="worker",
        )

    async def run(self, stop: asyncio.Event, wake: asyncio.Event) -> None:
        """Poll until `stop`; `wake` is set whenever deliveries were queued."""
        lag_due = time.monotonic()
        while not stop.is_set():
            messages = await self.source.batch()
            if self._ends_unknown:
                self._read_ends_soon()
            if messages:
                self._receive(messages)
            if self._revoked:
                self._revoked = False
                self.queues.drop_revoked()
            await self._apply_pauses()
            if messages:
                wake.set()
            if time.monotonic() >= lag_due:
                lag_due = time.monotonic() + LAG_EVERY_S
                await self.source.call(self._report_lag)

    def _receive(self, messages: Sequence[Message]) -> None:
        """Step 1 for a fetched batch: track every offset, queue each envelope by its level;
        a message that is no valid envelope goes to the DLQ (never executed)."""
        placed = []
        by_tp: dict[tuple[str, int], list[int]] = {}
        for msg in messages:
            tp = (msg.topic() or "", msg.partition() or 0)
            offset = msg.offset() or 0
            by_tp.setdefault(tp, []).append(offset)
            placed.append((msg, tp, offset))
        generations = {tp: self.offsets.track_many(tp, offs) for tp, offs in by_tp.items()}
        level_of, queues, decode = self.level_of, self.queues, RunEnvelope.decode
        sealer = self.run_seal
        early = broken.on(broken.OFFSETS_BEFORE_RESULTS)
        trusting = broken.on(broken.SUSPECT_IGNORED)
        late_ms = self.late_ms
        late_before = None if late_ms is None else int(time.time() * 1000) - late_ms
        assigned_end = self.assigned_end
        for msg, tp, offset in placed:
            generation = generations[tp]
            raw = msg.value() or b""
            try:
                env = decode(raw)
            except EnvelopeError as exc:
                reason = str(exc)
            except Exception as exc:  # unforeseen: this message only, never the loop
                log.exception("decoding a run envelope raised %s", type(exc).__name__)
                reason = f"could not be decoded: {exc!r}"
            else:
                kind, stamp = msg.timestamp()
                level = level_of[tp[0]]
                # A producer sets the timestamp it likes: one that is no instant a run can
                # hold is not recorded (it would fail the batch's claim).
                published = (
                    stamp
                    if kind != TIMESTAMP_NOT_AVAILABLE and INSTANT_MIN_MS < stamp < INSTANT_MAX_MS
                    else None
                )
                sealed = False
                suspect = True
                if sealer is not None:
                    headers = msg.headers()  # a list of (name, value), or None without any
                    sealed = isinstance(headers, list) and sealer.opens(raw, headers)
                    if sealed:
                        end = assigned_end.get(tp)
                        suspect = (
                            end is None
                            or offset < end
                            or (late_before is not None and (published or 0) < late_before)
                            or any(h[0] == AGAIN_HEADER for h in headers)  # type: ignore[union-attr]
                        ) and not trusting
                queues[level].append(
                    Delivery(tp, offset, generation, level, env, published, raw, sealed, suspect)
                )
                if early:
                    self.offsets.done(tp, offset, generation)
                continue
            log.warning("unreadable run message %s[%d]@%d: %s", *tp, offset, reason)
            self.dead_letter(tp, offset, generation, raw, reason)

    async def _apply_pauses(self) -> None:
        cap = self.queue_cap
        changed = self._assignment_changed
        self._assignment_changed = False
        for level in PRIORITIES:
            size = self.queues.size(level)
            if level not in self.paused and size >= cap:
                self.paused.add(level)
                await self.source.call(self._pause_level, level, True)
            elif level in self.paused and size <= cap // 2:
                self.paused.discard(level)
                await self.source.call(self._pause_level, level, False)
            elif level in self.paused and changed:  # newly assigned partitions start unpaused
                await self.source.call(self._pause_level, level, True)

    # On the consumer's I/O thread ---------------------------------------------------------

    def _pause_level(self, level: str, pause: bool) -> None:
        topic = self.topics.runs(level)
        parts = [tp for tp in self.source.consumer.assignment() if tp.topic == topic]
        if parts:
            (self.source.consumer.pause if pause else self.source.consumer.resume)(parts)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            # Unknown until the broker answers (`_read`): until then every delivery of it is
            # suspect. (Asking here, one partition at a time, held the consumer's thread ~0.1 s
            # per partition: a rebalance's starts stopped for seconds.)
            self.assigned_end[key] = None
            self._assignment_of[key] = next(self._assignments)
            self._ends_unknown.add(key)
            self.offsets.assign(key)
        self._assignment_changed = True

    def _read_ends_soon(self) -> None:
        """Ask the broker for the ends of the newly assigned partitions, off the fetch loop
        and the consumer's thread, unless a read is under way (or failed within a second)."""
        if self.read_ends is None or time.monotonic() < self._ends_retry_at:
            return
        if self._ends_task is not None and not self._ends_task.done():
            return
        # A snapshot: the consumer's thread adds to the set (list() copies it at once).
        asked = {key: self._assignment_of.get(key) for key in list(self._ends_unknown)}
        self._ends_task = asyncio.create_task(self._read(asked), name="read partition ends")

    async def _read(self, asked: dict[tuple[str, int], int | None]) -> None:
        """The ends of `asked`'s partitions, read after their assignment: at or past the end
        each had when it was assigned, so every delivery a previous owner may have started
        lies below (D-272). Not the client's cached high watermark: for a partition this
        worker held before, that is the end it last fetched, which may lie below what the
        previous owner ran since (a chaos round's worker kill ran 16 recorded runs again)."""
        assert self.read_ends is not None
        try:
            ends = await asyncio.to_thread(self.read_ends, list(asked))
        except Exception:  # the broker away: the deliveries stay suspect; asked again later
            log.warning("reading the ends of %d partitions failed", len(asked), exc_info=True)
            self._ends_retry_at = time.monotonic() + ENDS_RETRY_S
            return
        for key, end in ends.items():
            # Still the assignment the read was asked for (else the next read decides).
            if key in self.assigned_end and self._assignment_of.get(key) == asked.get(key):
                self.assigned_end[key] = end
                self._ends_unknown.discard(key)
        if self._ends_unknown.intersection(asked):
            self._ends_retry_at = time.monotonic() + ENDS_RETRY_S

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Hand the partitions to `release`, then commit each one's done position now: its
        next owner starts there."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        for key in keys:
            self.assigned_end.pop(key, None)
            self._ends_unknown.discard(key)
        if self.release is not None:
            positions = self.release(keys)
        else:
            positions = {key: self.offsets.revoke(key) for key in keys}
        final = [
            TopicPartition(key[0], key[1], position)
            for key, position in positions.items()
            if position is not None
        ]
        self._revoked = True
        if final:
            try:
                consumer.commit(offsets=final, asynchronous=False)
            except KafkaException as exc:  # lost rather than revoked: the new owner redelivers
                log.warning("commit on revocation failed: %s", exc)

    def _report_lag(self) -> None:
        seen: set[tuple[str, str]] = set()
        for tp in self.source.consumer.assignment():
            position = self.offsets.position((tp.topic, tp.partition))
            try:
                _low, high = self.source.consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if position is None or high < 0:
                continue
            labels = (tp.topic, str(tp.partition))
            self.metrics.lag.labels(*labels).set(max(0, high - position))
            seen.add(labels)
        for labels in self._lag_labels - seen:
            self.metrics.lag.remove(*labels)
        self._lag_labels = seen


def partition_ends(admin: AdminClient) -> ReadEndsFn:
    """`read_ends` through `admin`: one request per broker for every partition asked, the
    latest offset of each (those without an answer are left out)."""

    def read(keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not keys:
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        asked = {TopicPartition(topic, part): latest for topic, part in keys}
        ends: dict[tuple[str, int], int] = {}
        for tp, answer in admin.list_offsets(asked, request_timeout=READ_ENDS_TIMEOUT_S).items():
            try:
                offset = answer.result().offset
            except KafkaException:
                continue
            if offset >= 0:
                ends[(tp.topic, tp.partition)] = offset
        return ends

    return read
