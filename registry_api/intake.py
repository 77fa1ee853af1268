"""The registration intake: `<prefix>.registrations` → Postgres, rejects → `….rejected`.

One loop iteration handles one batch (up to `intake_batch` messages) in this order, which is
what makes a crash at any point lose nothing and apply nothing twice in effect (I5, I7):

    1. decode and validate every message; a bad one becomes a rejection, a good one an `Op`
       carrying its source (partition, offset) (admission.py: signatures, tenants, the job
       document, replays);
    2. apply all ops in one database transaction (store.apply): per-job order is the topic's
       order, and a job remembers the position of the last message applied to it, so a
       redelivered message is a no-op (`replay`). A batch holding calendar ops (rare) is
       applied in batch order instead: the jobs' ops between two calendar ops in one
       transaction, each calendar op in its own (registry_api/calendars.py), so a job naming a
       calendar created just before it finds it, and one after a delete finds it gone. A
       calendar remembers its last position too, so a redelivered calendar op is a replay;
    3. publish the rejections (including ops the database refused: unknown job, conflict, a
       stale version) and wait until the broker has acknowledged every one;
    4. only then store the batch's offsets; the consumer commits stored offsets in the
       background (tickwheel/kafka/consuming.py), never per message synchronously.

A crash before 4 redelivers the batch: step 2 is then a no-op for what was applied (in a batch
of several transactions, for each one that committed), and step 3 may publish a rejection
again (the rejected topic is at-least-once; its `source` position identifies duplicates). An
op refused the first time left no trace, so a redelivery decides it again against what the
database holds then. A database or broker that is unavailable makes the loop seek back to
the batch's first offsets and retry with backoff, so nothing is skipped.

Step 1 writes no job, but it ends by remembering the batch's signed message ids with their
positions (`RegistryStore.remember_message_ids`), to refuse replays (admission.py). A
redelivery has its own position and goes on as before; a crash after the ids were remembered
redelivers the batch at the same positions, so nothing is lost. A tenant's quotas are decided
in step 2, inside the batch's transaction (store.py, quotas.py): an op over one is rejected
in step 3 like any op the database side refuses, naming the quota.

One message can never stop the loop (I7): every message ends applied or rejected.
- Decoding and validating guard each message (admission.py): an unforeseen exception rejects
  that message.
- The tenant lookup of step 1 and the write of step 2 tell "this input" from "this moment"
  (`tickwheel.db.is_data_error`): a batch refused for its data, or failing with an exception
  that is not the database being unavailable, is applied op by op, and the op at fault is
  rejected alone; only an unavailable database or broker retries the batch.
- A rejection always fits in one message (`Rejection.fitted`, sized by the producer's
  `message.max.bytes`): an original too large to quote whole is cut, with its size and digest.
Anything that still escapes the loop (a fatal consumer error, a bug in the loop itself) ends
the part with its traceback; the process runner then stops the process non-zero (I9).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from tickwheel.crash_points import crash_point, fail_point
from tickwheel.db import DB_ERRORS, is_data_error
from tickwheel.envelopes.registrations import Rejection
from tickwheel.kafka.admin import topic_offsets
from tickwheel.kafka.consuming import BatchConsumer
from tickwheel.kafka.producing import (
    PRODUCER_MESSAGE_MAX_BYTES,
    Outgoing,
    PublishError,
    publish_reports,
    value_room,
)
from tickwheel.registry_api import calendars
from tickwheel.registry_api.admission import (
    SIGNATURE_WINDOW_S,
    Admission,
    Prepared,
    Rejected,
    RejectKind,
    calendar_refusal,
    position,
    refusal,
)
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import Applied, NewJobsPlan, RegistryStore
from tickwheel.runtime import PartState, awaiting
from tickwheel.stall import SAMPLE_TIMEOUT_MIN_S, STALL_SAMPLES, Backlog, StallWatch, samples

log = logging.getLogger("tickwheel.registry.intake")

RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # seconds, then stays at the last
# A key longer than this is replaced by `sha256:<hex>` on the rejected topic: the key must not
# crowd out the reason. Job ids are at most 128 characters, so only garbage is affected.
REJECTION_KEY_MAX_BYTES = 4096
STALL_S = 60.0  # default: how long registrations may wait unread before the part ends
_UNAVAILABLE = (
    *DB_ERRORS,
    TimeoutError,
    PublishError,  # the broker did not acknowledge: retry the batch
    KafkaException,
)


class IntakeStalled(RuntimeError):
    """Registrations wait unread while the intake looks alive: the part ends (I9)."""


def retryable(exc: BaseException) -> bool:
    """The database or the network failing, not the input: retry the batch as it is."""
    return isinstance(exc, _UNAVAILABLE) and not is_data_error(exc)


@dataclass
class BatchReport:
    """What one batch did, for metrics, logs and tests."""

    messages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # RejectKind -> rejections
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)  # (tenant, quota) -> n
    lag: dict[int, int] = field(default_factory=dict)  # partition -> messages behind its end
    duration_s: float = 0.0  # seconds from the batch's transaction to its offsets stored


def _unapplied(exc: Exception) -> tuple[str, RejectKind]:
    """Why an op the database side raised on (not being unavailable) is rejected."""
    if is_data_error(exc):
        return f"the database refused it: {exc}", RejectKind.DATABASE
    log.exception("applying a registration raised %s", type(exc).__name__)
    return f"could not be applied: {type(exc).__name__}: {exc}", RejectKind.ERROR


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RegistrationIntake:
    """Consumes registrations; owns its consumer and the producer of rejections.

    `health` is this part's record for /healthz: `consuming` (the loop runs and its last batch
    settled), `last_batch_at`, `partitions` (held, as `topic[n]`), `failing` (batches failed in
    a row, retried with backoff) and `last_error`.
    """

    def __init__(
        self,
        store: RegistryStore,
        limits: Limits,
        consumer: Consumer,
        producer: Producer,
        probe: Consumer,
        registrations_topic: str,
        rejected_topic: str,
        batch_size: int,
        *,
        message_max_bytes: int = PRODUCER_MESSAGE_MAX_BYTES,
        health: PartState | None = None,
        require_signature: bool = True,
        signature_window_s: int = SIGNATURE_WINDOW_S,
        stall_s: float = STALL_S,
    ) -> None:
        self.store = store
        self.stall_s = stall_s
        # When the oldest batch the loop fetched and has not settled was fetched (monotonic);
        # None while every fetched batch has settled, or been rewound to retry.
        self._unsettled_since: float | None = None
        self.admission = Admission(
            store,
            limits,
            registrations_topic,
            require_signature=require_signature,
            signature_window_s=signature_window_s,
        )
        self.registrations_topic = registrations_topic
        self.health = health if health is not None else PartState("intake")
        self.health.report(consuming=False, last_batch_at=None, partitions=[], failing=0)
        self._partitions: set[tuple[str, int]] = set()
        self.source = BatchConsumer(
            consumer,
            [registrations_topic],
            batch_size,
            name="intake",
            on_assign=self._assigned,
            on_revoke=self._revoked,
        )
        self.producer = producer
        self.rejected_topic = rejected_topic
        self.message_max_bytes = message_max_bytes
        self._committing: asyncio.Task[BatchReport] | None = None
        # Called with each settled batch's report (metrics, benchmarks).
        self.on_batch: Callable[[BatchReport], None] | None = None
        # The watch's own client of the group (never subscribed) and its thread: the broker's
        # answers about the topic never wait in the consumer's I/O thread.
        self.probe = probe
        self._probing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-probe")

    # Rebalance callbacks (on the consumer's I/O thread): incremental with cooperative-sticky.

    def _assigned(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._partitions |= {(tp.topic, tp.partition) for tp in partitions}
        self._report_partitions()

    def _revoked(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._partitions -= {(tp.topic, tp.partition) for tp in partitions}
        self._report_partitions()

    def _report_partitions(self) -> None:
        held = sorted(self._partitions)
        self.health.report(partitions=[f"{topic}[{n}]" for topic, n in held])

    async def run(self, stop: asyncio.Event) -> None:
        """Consume and apply until `stop`; two batches in flight at most.

        While batch N's transaction, rejections and offsets are under way, batch N+1 is
        consumed and validated (pure CPU), so the database's work and ours overlap. Batch N
        always settles (offsets stored, or a rewind) before N+1 is handed to the database, so
        offsets are stored in order and never ahead of the database (I5).

        Beside the loop a watch samples the topic (`_watch`): registrations left unread for
        `stall_s` end the part with `IntakeStalled`, so the process exits for its supervisor
        to restart it instead of lingering half-dead (I9).
        """
        await self.admission.join_replay_memory()
        self.health.report(consuming=True)
        loop = asyncio.create_task(self._loop(stop), name="intake-loop")
        watch = asyncio.create_task(self._watch(stop, loop), name="intake-watch")
        try:
            await asyncio.wait({loop, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch.done() and not loop.done():
                watch.result()  # raises IntakeStalled (returns only once `stop` is set)
            await loop
        finally:
            for task in (watch, loop):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self.health.report(consuming=False)

    async def _watch(self, stop: asyncio.Event, loop: asyncio.Task[None]) -> None:
        """Every `stall_s / STALL_SAMPLES`, raise `IntakeStalled` if registrations have waited
        `stall_s`: fetched by the loop and not settled (the loop waits on a call that does not
        return), or unread on the topic (tickwheel/stall.py: the consumer no longer fetches, or
        holds no partition while its group has messages), or if the consumer's I/O thread has
        not answered a sample for that long. Nothing is judged while the loop backs off from a
        failure it reports (`failing`), nor while the broker does not answer a sample."""
        judge = StallWatch(self.stall_s)
        timeout_s = max(self.stall_s / STALL_SAMPLES, SAMPLE_TIMEOUT_MIN_S)
        answered = time.monotonic()
        async for now in samples(stop, self.stall_s):
            if self.health.detail.get("failing"):
                judge.reset()
                answered = now
                continue
            since = self._unsettled_since
            if since is not None and now - since >= self.stall_s:
                self._stalled(
                    loop,
                    f"a batch of registrations fetched {now - since:.0f} s ago has not settled",
                )
            try:
                held, positions = await asyncio.wait_for(self.source.holding(), timeout_s)
            except TimeoutError:
                if now - answered >= self.stall_s:
                    silent = f"{now - answered:.0f} s"
                    self._stalled(loop, f"the consumer's I/O thread has not answered for {silent}")
                continue
            answered = time.monotonic()
            try:
                starts, ends, committed = await asyncio.get_running_loop().run_in_executor(
                    self._probing,
                    topic_offsets,
                    self.probe,
                    [self.registrations_topic],
                    timeout_s,
                )
            except KafkaException as exc:
                log.warning("could not sample the registrations topic: %s", exc)
                judge.reset()
                continue
            backlog = Backlog.of(held, positions, starts, ends, committed)
            stalls = judge.judge(backlog, time.monotonic())
            if stalls:
                holds = sorted(f"{t}[{n}]" for t, n in held) or "none"
                self._stalled(
                    loop,
                    "; ".join(stall.describe(time.monotonic()) for stall in stalls)
                    + f" (partitions held: {holds})",
                )

    def _stalled(self, loop: asyncio.Task[None], what: str) -> None:
        """Report the stall, log where the loop waits, and end the part."""
        self.health.report(consuming=False, stalled=what)
        log.error("registration intake stalled: %s; the loop waits at:\n%s", what, awaiting(loop))
        raise IntakeStalled(
            f"registration intake stalled: {what}; exiting for the supervisor to restart it"
        )

    async def _loop(self, stop: asyncio.Event) -> None:
        try:
            await self._batches(stop)
        finally:
            # The loop is dying: let the batch under way settle before the consumer closes
            # (its failure changes nothing: what it did not commit is redelivered).
            if self._committing is not None:
                with contextlib.suppress(Exception):
                    await self._committing

    async def _batches(self, stop: asyncio.Event) -> None:
        failures = 0
        inflight: tuple[list[Message], asyncio.Task[BatchReport]] | None = None
        while inflight is not None or not stop.is_set():
            fail_point("intake_loop")
            messages: list[Message] = [] if stop.is_set() else await self.source.batch()
            if messages and self._unsettled_since is None:
                self._unsettled_since = time.monotonic()
            fetched_at = time.monotonic()
            prepared: Prepared | None = None
            unprepared: BaseException | None = None
            try:
                prepared = await self.admission.prepare(messages) if messages else None
            except Exception as exc:
                if not retryable(exc):
                    raise
                unprepared = exc
            if inflight is not None:
                batch, task = inflight
                inflight = None
                try:
                    report = await task
                except Exception as exc:
                    if not retryable(exc):
                        raise
                    log.exception("registration batch failed; rewinding to retry it")
                    # The batch consumed meanwhile lies after the failed one: drop it too.
                    await self.source.rewind([*batch, *messages])
                    self._unsettled_since = None
                    failures = await self._back_off(failures, exc)
                    continue
                failures = 0
                self._unsettled_since = fetched_at if messages else None
                self.health.report(
                    consuming=True, failing=0, last_error=None, last_batch_at=_now_iso()
                )
                log.info("registrations batch", extra={"batch": report.__dict__})
                if self.on_batch is not None:
                    self.on_batch(report)
            if unprepared is not None:
                log.error(
                    "registration batch could not be prepared; rewinding to retry it",
                    exc_info=unprepared,
                )
                await self.source.rewind(messages)
                self._unsettled_since = None
                failures = await self._back_off(failures, unprepared)
                continue
            if prepared is not None:
                self._committing = asyncio.create_task(self.commit(prepared))
                inflight = (messages, self._committing)

    async def _back_off(self, failures: int, exc: BaseException) -> int:
        self.health.report(
            consuming=False, failing=failures + 1, last_error=f"{type(exc).__name__}: {exc}"
        )
        await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])
        return failures + 1

    async def close(self) -> None:
        # close() commits the stored offsets (and only those) and leaves the group.
        await self.source.close()
        self.admission.close()
        self._probing.shutdown(wait=True)
        await asyncio.to_thread(self.probe.close)

    async def commit(self, prepared: Prepared) -> BatchReport:
        """Steps 2 to 4: apply, publish rejections, store offsets."""
        started = time.perf_counter()
        report = BatchReport(messages=len(prepared.messages))
        rejected = prepared.rejected
        if prepared.calendar_ops:
            await self._apply_in_order(prepared, report)
        elif prepared.ops:
            await self._apply_jobs(
                prepared.ops, prepared.op_messages, prepared.plan, report, rejected
            )
        crash_point("intake_after_db")
        if rejected:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._publish_rejections, rejected)
            report.rejected = len(rejected)
            for item in rejected:
                report.reasons[item.kind] = report.reasons.get(item.kind, 0) + 1
        crash_point("intake_before_offsets")
        await self.source.store_offsets(prepared.messages)
        report.duration_s = time.perf_counter() - started
        report.lag = await self.source.call(self._lag, prepared.messages)
        return report

    async def _apply_jobs(
        self,
        ops: list[Op],
        op_messages: list[Message],
        plan: NewJobsPlan | None,
        report: BatchReport,
        rejected: list[Rejected],
    ) -> None:
        """Apply job ops in one transaction (op by op if the batch is refused for its data);
        count their outcomes and reject what the database side refused."""
        try:
            results: list[Applied | None] = list(await self.store.apply(ops, plan))
        except Exception as exc:
            if retryable(exc):
                raise
            log.warning("batch refused (%s); applying op by op", type(exc).__name__, exc_info=True)
            results = await self._apply_singly(ops, op_messages, rejected)
        for msg, applied in zip(op_messages, results, strict=True):
            if applied is None:
                continue
            outcome = applied.outcome
            report.outcomes[outcome.value] = report.outcomes.get(outcome.value, 0) + 1
            if applied.quota is not None:
                refused = (applied.op.tenant, applied.quota.quota.value)
                report.refusals[refused] = report.refusals.get(refused, 0) + 1
                rejected.append(Rejected(msg, applied.quota.detail, RejectKind.QUOTA))
            elif (reason := refusal(applied)) is not None:
                rejected.append(Rejected(msg, reason, RejectKind.REFUSED))

    async def _apply_in_order(self, prepared: Prepared, report: BatchReport) -> None:
        """Step 2 for a batch holding calendar ops: in batch order, each run of job ops in one
        transaction, then the calendar op after it in its own (each op keeps its place)."""
        at = {position(msg): i for i, msg in enumerate(prepared.messages)}
        ops, op_messages = prepared.ops, prepared.op_messages
        start = 0
        for op, msg in zip(prepared.calendar_ops, prepared.calendar_messages, strict=True):
            end = start
            while end < len(ops) and at[position(op_messages[end])] < at[position(msg)]:
                end += 1
            if end > start:
                segment = slice(start, end)
                await self._apply_jobs(
                    ops[segment], op_messages[segment], None, report, prepared.rejected
                )
            start = end
            await self._apply_calendar(op, msg, report, prepared.rejected)
        if start < len(ops):
            await self._apply_jobs(
                ops[start:], op_messages[start:], None, report, prepared.rejected
            )

    async def _apply_calendar(
        self, op: calendars.CalendarOp, msg: Message, report: BatchReport, rejected: list[Rejected]
    ) -> None:
        """Apply one calendar op; one the database side refuses is rejected alone (I7)."""
        try:
            result = await calendars.apply(self.store.pool, op)
        except Exception as exc:
            if retryable(exc):
                raise
            rejected.append(Rejected(msg, *_unapplied(exc)))
            return
        counted = f"calendar_{result.outcome.value}"
        report.outcomes[counted] = report.outcomes.get(counted, 0) + 1
        if (reason := calendar_refusal(op, result)) is not None:
            rejected.append(Rejected(msg, reason, RejectKind.REFUSED))

    def _lag(self, messages: Sequence[Message]) -> dict[int, int]:
        """Per partition of the batch: messages between the batch's end and the partition's
        end, by the consumer's cached high watermarks (no broker round trip)."""
        ends: dict[int, int] = {}
        for msg in messages:
            partition, offset = position(msg)
            ends[partition] = max(ends.get(partition, -1), offset + 1)
        lag = {}
        for partition, end in ends.items():
            tp = TopicPartition(self.registrations_topic, partition)
            try:
                _low, high = self.source.consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high >= 0:
                lag[partition] = max(0, high - end)
        return lag

    async def _apply_singly(
        self, ops: list[Op], messages: list[Message], rejected: list[Rejected]
    ) -> list[Applied | None]:
        """Apply ops one transaction each; one the database refuses (or that raises anything
        but unavailability) rejects its message alone (I7)."""
        results: list[Applied | None] = []
        for op, msg in zip(ops, messages, strict=True):
            try:
                results.extend(await self.store.apply([op]))
            except Exception as exc:
                if retryable(exc):
                    raise
                rejected.append(Rejected(msg, *_unapplied(exc)))
                results.append(None)
        return results

    # Kafka side ------------------------------------------------------------------------------

    def _rejection_key(self, message: Message) -> bytes | None:
        key = message.key()
        if isinstance(key, str):
            key = key.encode()
        if key is not None and len(key) > REJECTION_KEY_MAX_BYTES:
            return b"sha256:" + hashlib.sha256(key).hexdigest().encode()
        return key

    def _outgoing(self, item: Rejected, max_bytes: int) -> Outgoing:
        key = self._rejection_key(item.message)
        rejection = Rejection.fitted(
            item.reason,
            item.message.partition() or 0,
            item.message.offset() or 0,
            item.message.value() or b"",
            value_room(max_bytes, key),
        )
        return Outgoing(self.rejected_topic, key=key, value=rejection.encode())

    def _publish_rejections(self, rejected: list[Rejected]) -> None:
        failed = publish_reports(self.producer, rejected, self._outgoing, self.message_max_bytes)
        if failed:
            raise PublishError(failed)
