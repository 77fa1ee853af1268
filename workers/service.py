"""The `tickwheel worker` process: consume run envelopes, claim, execute, record, then commit.

Parts (each a named task under `tickwheel.runtime.Process`; one that dies stops the process
with exit 1):

    fetch      polls the three run topics without pause (so a long handler never pushes the
               consumer past max.poll.interval.ms), decodes envelopes into one local queue per
               priority, and pauses a priority's partitions while its queue is full
    dispatch   picks deliveries by weighted priority (workers/priorities.py) and per-tenant
               caps for the free execution slots, claims them in one UPDATE, starts the claimed
    record     writes finished attempts in batches and stores offsets (the steps below)
    heartbeat  every lease/3, extends the lease of every run this worker holds

A delivery's path, and why a crash at any step loses nothing (I4, I5, I7):

    1. received: its offset is tracked as outstanding (tickwheel.kafka.ContiguousOffsets);
       nothing stored. A message that is no valid envelope jumps to step 5 as an unreadable
       record (it is never executed).
    2. claimed: `pending|published → running` WHERE attempt = the envelope's attempt, with
       this worker's id and a lease. No row back: a duplicate or stale delivery: it is done
       at once (nothing to write), counted, and never executed. A delivery naming no run at
       all (no row) was not produced by a scheduler: it goes to step 5 as unreadable.
    3. executed: the job's handler or HTTP target runs with the job's payload under its
       timeout_ms, as the claim read them from the job's row (the envelope's copy is only
       compared: a difference is counted and logged, never run); the heartbeat
       keeps the lease while it runs. A crash here leaves the row `running`; its lease lapses
       and the scheduler's sweeper re-dispatches it as attempt + 1 (or dead-letters it when
       the attempts are spent). The message's offset was not stored, so it is redelivered
       too; its claim then finds attempt + 1 (or a finished row) and skips it.
    4. decided (workers/retry.py): succeeded, retrying with full-jitter backoff, or dead.
    5. for dead runs and unreadable deliveries: the DLQ message is published and its
       delivery confirmed BEFORE anything else. A crash after this and before step 6 leaves
       the row `running`: the lease lapses, and the sweeper finds attempt >= max_attempts and
       dead-letters it itself (a second DLQ message: the DLQ is at-least-once, `run_key` plus
       `attempts` identifies duplicates) — except a PermanentError with attempts left, which
       the sweeper re-dispatches as a new attempt, runs again and dead-letters then. Writing
       `dead` first instead would lose the DLQ message in that gap: the redelivery's claim
       finds nothing to do. An unreadable delivery has no row: a crash before step 7
       redelivers it and it is published again.
    6. the results are written in one UPDATE fenced by `attempt = claimed AND status =
       'running'`. A crash after this and before step 7 redelivers the message: its claim
       finds the run finished and skips it — no second execution. A result fenced out (the
       lease lapsed, the sweeper moved the run on) is dropped and counted as `fenced`; if it
       was a dead one, its DLQ message went out in step 5 anyway (at-least-once: the sweeper
       may publish one as well).
    7. the delivery is done; each partition's highest contiguous done offset is stored, and
       librdkafka commits stored offsets in the background (and on revocation and close).
       Never a synchronous commit per message.

Shutdown (SIGTERM/SIGINT): fetch stops, queued deliveries are dropped unclaimed (their offsets
were not stored: the group redelivers them), in-flight runs get `worker_grace_s` to finish and
be recorded; runs still executing then are cancelled and left to their lease. Then the
consumer commits what was stored and leaves the group; exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import asyncpg
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)

from tickwheel import broken
from tickwheel.clock import ms_to_datetime, now_ms
from tickwheel.config import Settings
from tickwheel.crash_points import crash_point
from tickwheel.db import DB_ERRORS
from tickwheel.deployment import worker_group
from tickwheel.domain import INSTANT_MAX_MS, INSTANT_MIN_MS, PRIORITIES, RunStatus
from tickwheel.envelopes import DeadLetter, EnvelopeError, RunEnvelope, UnreadableRun, cut_text
from tickwheel.kafka import (
    PRODUCER_MESSAGE_MAX_BYTES,
    BatchConsumer,
    ContiguousOffsets,
    Outgoing,
    PublishError,
    publish_reports,
    value_room,
)
from tickwheel.runtime import Process
from tickwheel.topics import Topics
from tickwheel.workers import handlers
from tickwheel.workers.handlers import Context, PermanentError
from tickwheel.workers.metrics import PartsCollector, WorkerMetrics
from tickwheel.workers.priorities import WeightedPicker
from tickwheel.workers.retry import Decision, decide
from tickwheel.workers.store import Attempted, Claim, JobContent, ResultRow, RunId, RunStore
from tickwheel.workers.targets import HttpTargets, RetryableTargetError, TargetPolicy

log = logging.getLogger("tickwheel.worker")

FETCH_POLL_S = 0.05  # seconds one fetch waits for messages
IDLE_WAIT_S = 0.5  # seconds the dispatcher sleeps when it has nothing to start (or a wake-up)
LAG_EVERY_S = 1.0  # seconds between per-partition lag reports (cached watermarks: cheap)
# What a failed result write raises: the database, or the broker refusing a dead letter.
RECORD_ERRORS: tuple[type[BaseException], ...] = (*DB_ERRORS, PublishError)
DB_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0)  # then the process dies (I9)
RECORD_LINGER_S = 0.005  # after a first result, gather others finishing this long
WORKER_ASSIGNOR = "range"  # see make_worker


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class Delivery:
    """A run envelope received and not yet done."""

    tp: tuple[str, int]
    offset: int
    generation: int
    level: str
    env: RunEnvelope
    published_ms: int | None  # the record's timestamp: when the leader produced it
    raw: bytes  # the message's value, for the DLQ if the delivery turns out to be forged

    @property
    def run(self) -> RunId:
        return (self.env.tenant, self.env.job_id, self.env.scheduled_at)


@dataclass
class Finished:
    delivery: Delivery
    claim: Claim
    decision: Decision


@dataclass
class Unreadable:
    tp: tuple[str, int]
    offset: int
    generation: int
    record: UnreadableRun


class Worker:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        consumer: Consumer,
        producer: Producer,
        worker_id: str,
        *,
        concurrency: int | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.concurrency = concurrency or settings.worker_concurrency
        self.metrics = metrics or WorkerMetrics()
        self.topics = Topics(settings.topic_prefix)
        self.level_of = {self.topics.runs(p): p for p in PRIORITIES}
        self.store = RunStore(pool, worker_id, settings.lease_s * 1000)
        self.producer = producer
        self.offsets = ContiguousOffsets()
        self.queues: dict[str, deque[Delivery]] = {p: deque() for p in PRIORITIES}
        self.picker = WeightedPicker(settings.priority_weights, settings.worker_high_reserved_slots)
        self.targets = HttpTargets(
            TargetPolicy(
                allowlist=tuple(settings.target_allowlist),
                rate_per_s=settings.target_rate_per_s,
                burst=settings.target_burst,
                breaker_failures=settings.target_breaker_failures,
                breaker_cooldown_s=settings.target_breaker_cooldown_s,
            )
        )
        self.leased: dict[RunId, int] = {}  # runs held (executing or awaiting their write)
        self.executing = 0
        self.tenant_load: Counter[str] = Counter()
        self.results: asyncio.Queue[Finished | Unreadable] = asyncio.Queue()
        self.wake = asyncio.Event()
        self.executions_done = asyncio.Event()
        self.recorded = asyncio.Event()
        self.paused: set[str] = set()
        self._assignment_changed = False
        self._revoked = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="handler")
        self._lag_labels: set[tuple[str, str]] = set()
        self._claim_failures = 0  # claims failed in a row (the database unavailable)
        self.source = BatchConsumer(
            consumer,
            list(self.level_of),
            settings.worker_batch,
            # librdkafka's consume waits for a full batch or the timeout: a short timeout and
            # no linger hand over what arrived at once, so a fast worker's queues never wait
            # half a second for the next fetch while it has slots free.
            poll_timeout_s=FETCH_POLL_S,
            linger_s=0.0,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            name="worker",
        )

    def start(self, process: Process) -> None:
        process.spawn("fetch", self.fetch(process.stop))
        process.spawn("dispatch", self.dispatch(process.stop))
        process.spawn("record", self.record())
        process.spawn("heartbeat", self.heartbeat())
        process.on_close(self.close)

    async def close(self) -> None:
        """Commit the stored offsets and leave the group; release clients and threads."""
        try:
            await self.source.close()
        finally:
            await self.targets.close()
            self._threads.shutdown(wait=False, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, 10)

    # --- fetch --------------------------------------------------------------------------------

    async def fetch(self, stop: asyncio.Event) -> None:
        lag_due = time.monotonic()
        while not stop.is_set():
            messages = await self.source.batch()
            for msg in messages:
                tp = (msg.topic() or "", msg.partition() or 0)
                offset = msg.offset() or 0
                generation = self.offsets.track(tp, offset)
                raw = msg.value() or b""
                try:
                    env = RunEnvelope.decode(raw)
                except EnvelopeError as exc:
                    reason = str(exc)
                except Exception as exc:  # unforeseen: this message only, never the loop
                    log.exception("decoding a run envelope raised %s", type(exc).__name__)
                    reason = f"could not be decoded: {exc!r}"
                else:
                    kind, stamp = msg.timestamp()
                    self.queues[self.level_of[tp[0]]].append(
                        Delivery(
                            tp,
                            offset,
                            generation,
                            self.level_of[tp[0]],
                            env,
                            # A producer sets the timestamp it likes: one that is no instant a
                            # run can hold is not recorded (it would fail the batch's claim).
                            stamp
                            if kind != TIMESTAMP_NOT_AVAILABLE
                            and INSTANT_MIN_MS < stamp < INSTANT_MAX_MS
                            else None,
                            raw,
                        )
                    )
                    if broken.on(broken.OFFSETS_BEFORE_RESULTS):
                        self.offsets.done(tp, offset, generation)
                    continue
                log.warning("unreadable run message %s[%d]@%d: %s", *tp, offset, reason)
                self._dead_letter(tp, offset, generation, raw, reason)
            if self._revoked:
                self._revoked = False
                self._drop_revoked()
            await self._apply_pauses()
            if messages:
                self.wake.set()
            if time.monotonic() >= lag_due:
                lag_due = time.monotonic() + LAG_EVERY_S
                await self.source.call(self._report_lag)

    def _dead_letter(
        self, tp: tuple[str, int], offset: int, generation: int, raw: bytes, reason: str
    ) -> None:
        """A message never to execute goes to the DLQ as unreadable, with its bytes (step 5)."""
        record = UnreadableRun(reason, tp[0], tp[1], offset, raw, self.worker_id, now_ms())
        self.results.put_nowait(Unreadable(tp, offset, generation, record))

    def _drop_revoked(self) -> None:
        for queue in self.queues.values():
            kept = [d for d in queue if self.offsets.generation(d.tp) == d.generation]
            queue.clear()
            queue.extend(kept)

    async def _apply_pauses(self) -> None:
        cap = self.settings.worker_queue_per_priority
        changed = self._assignment_changed
        self._assignment_changed = False
        for level in PRIORITIES:
            size = len(self.queues[level])
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
            self.offsets.assign((tp.topic, tp.partition))
        self._assignment_changed = True

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit each revoked partition's done position now: its next owner starts there."""
        final = []
        for tp in partitions:
            position = self.offsets.revoke((tp.topic, tp.partition))
            if position is not None:
                final.append(TopicPartition(tp.topic, tp.partition, position))
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

    # --- dispatch -----------------------------------------------------------------------------

    async def dispatch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.wake.clear()
            picked = self._pick()
            if not picked:
                await _wait_any(self.wake, stop, IDLE_WAIT_S)
                continue
            await self._claim_and_start(picked)
        await self._drain()
        self.executions_done.set()

    def _pick(self) -> list[Delivery]:
        """Deliveries for the free slots: weighted by priority, within the tenant caps."""
        free = self.concurrency - self.executing
        cap = self.settings.worker_tenant_concurrency
        load = Counter(self.tenant_load)
        picked: list[Delivery] = []
        while free > 0:
            choice = {level: self._eligible(level, load, cap) for level in PRIORITIES}
            ready = [level for level, index in choice.items() if index is not None]
            level = self.picker.pick(ready, free)
            if level is None:
                break
            queue, index = self.queues[level], choice[level]
            assert index is not None
            delivery = queue[index]
            del queue[index]
            picked.append(delivery)
            load[delivery.env.tenant] += 1
            free -= 1
        return picked

    def _eligible(self, level: str, load: Counter[str], cap: int) -> int | None:
        queue = self.queues[level]
        while queue and self.offsets.generation(queue[0].tp) != queue[0].generation:
            queue.popleft()  # its partition was revoked: the next owner has it
        if not queue:
            return None
        if cap <= 0:
            return 0
        for index, delivery in enumerate(queue):
            if load[delivery.env.tenant] < cap:
                return index
        return None

    async def _claim_and_start(self, picked: list[Delivery]) -> None:
        # Two deliveries of one run may carry different attempts (a stale one and its
        # re-dispatch): both are asked for, at most one can match the row.
        wanted = {
            (d.run, d.env.attempt): Attempted(d.run, d.env.attempt, d.published_ms) for d in picked
        }
        try:
            claims, refused = await self.store.claim_isolating(list(wanted.values()))
        except DB_ERRORS as exc:
            self._claim_failures += 1
            pause_s = DB_RETRY_BACKOFF_S[min(self._claim_failures, len(DB_RETRY_BACKOFF_S)) - 1]
            if self._claim_failures == 1:
                log.exception("claiming %d runs failed; they wait in the queue", len(wanted))
            else:  # one traceback per outage, not one per attempt
                log.warning(
                    "claiming %d runs failed again (%d in a row; next try in %.1f s): %s",
                    len(wanted),
                    self._claim_failures,
                    pause_s,
                    exc,
                )
            for d in reversed(picked):
                self.queues[d.level].appendleft(d)
            await asyncio.sleep(pause_s)
            return
        self._claim_failures = 0
        if refused:
            kept = []
            for d in picked:
                reason = refused.get((d.run, d.env.attempt))
                if reason is None:
                    kept.append(d)
                else:
                    log.warning(
                        "delivery of %s refused by the database; dead-lettered", d.env.run_key
                    )
                    self._dead_letter(d.tp, d.offset, d.generation, d.raw, reason)
            picked = kept
        unclaimed: list[Delivery] = []
        for d in picked:
            claim = claims.get(d.run)
            if claim is None or claim.attempt != d.env.attempt:
                unclaimed.append(d)
                continue
            del claims[d.run]  # a second delivery of this attempt in the batch is a duplicate
            self.metrics.start_lateness.observe(
                max(0, claim.started_ms - d.env.scheduled_at) / 1000
            )
            self.leased[d.run] = claim.attempt
            self.executing += 1
            self.tenant_load[d.env.tenant] += 1
            self.metrics.in_flight.set(self.executing)
            task = asyncio.create_task(self._execute(d, claim), name=f"run {d.env.run_key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if unclaimed:
            await self._skip(unclaimed)

    async def _skip(self, unclaimed: Sequence[Delivery]) -> None:
        """Deliveries that claimed nothing are done at once; say why in the metrics."""
        try:
            found = await self.store.statuses([d.run for d in unclaimed])
        except DB_ERRORS:
            found = None  # the reason is only for the metrics; the skip stands
        for d in unclaimed:
            reason = "duplicate"
            if found is not None:
                row = found.get(d.run)
                if row is None:
                    reason = "unknown_run"
                elif row[1] != d.env.attempt:
                    reason = "stale"
                elif row[2]:
                    reason = "held"
                    log.warning(
                        "delivery of %s, which overlap buffer_one holds back, skipped",
                        d.env.run_key,
                        extra={"run_key": d.env.run_key},
                    )
            self.metrics.skipped.labels(reason).inc()
            if reason == "unknown_run":  # no scheduler made it: dead-lettered, with its bytes
                log.warning(
                    "delivery of an unknown run %s dead-lettered",
                    d.env.run_key,
                    extra={"run_key": d.env.run_key},
                )
                self._dead_letter(
                    d.tp,
                    d.offset,
                    d.generation,
                    d.raw,
                    "names no run: there is no row for this run key (not produced by a scheduler)",
                )
                continue
            self.offsets.done(d.tp, d.offset, d.generation)
        await self.source.store_positions(self.offsets.advanced())

    async def _execute(self, d: Delivery, claim: Claim) -> None:
        env = d.env
        ctx = Context(
            run_key=env.run_key,
            tenant=env.tenant,
            job_id=env.job_id,
            scheduled_at=ms_to_datetime(env.scheduled_at),
            attempt=claim.attempt,
        )
        error: str | None = None
        permanent = False
        started = time.monotonic()
        job = claim.job
        timeout_ms = None if job is None else job.timeout_ms
        if job is not None and _differs(env, job):
            self.metrics.envelope_mismatch.inc()
            log.warning(
                "envelope of %s differs from its job's content; the job's runs",
                env.run_key,
                extra={"run_key": env.run_key},
            )
        try:
            async with asyncio.timeout(
                None if timeout_ms is None else timeout_ms / 1000
            ) as deadline:
                await self._invoke(job, env.run_key, ctx)
        except PermanentError as exc:
            error, permanent = str(exc) or "PermanentError", True
        except RetryableTargetError as exc:
            error = str(exc)
        except TimeoutError as exc:
            error = (
                f"timed out after {timeout_ms} ms" if deadline.expired() else f"TimeoutError: {exc}"
            )
        except asyncio.CancelledError:
            # Shutdown past its grace: no result; the lease lapses and the scheduler moves on.
            self.leased.pop(d.run, None)
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self.metrics.handler_seconds.observe(time.monotonic() - started)
            self.executing -= 1
            self.tenant_load[env.tenant] -= 1
            if self.tenant_load[env.tenant] <= 0:
                del self.tenant_load[env.tenant]
            self.metrics.in_flight.set(self.executing)
            self.wake.set()
        decision = decide(
            # An exception's message can be as large as the handler likes: the row and the
            # dead letter keep its start.
            error=None if error is None else cut_text(error),
            permanent=permanent,
            attempt=claim.attempt,
            max_attempts=claim.max_attempts,
            base_ms=claim.backoff_base_ms,
            cap_ms=claim.backoff_cap_ms,
        )
        self.results.put_nowait(Finished(d, claim, decision))

    async def _invoke(self, job: JobContent | None, run_key: str, ctx: Context) -> None:
        if job is None:  # the job's row is gone: nothing to run (a dead letter)
            raise PermanentError("its job no longer exists")
        if job.target is not None:
            await self.targets.call(job.target, job.payload, run_key)
            return
        assert job.handler is not None
        fn = handlers.resolve(job.handler)
        if fn is None:
            raise PermanentError(
                f"no handler named {job.handler!r} is loaded in this worker (--handlers)"
            )
        if handlers.is_async(fn):
            await fn(ctx, job.payload)
        else:
            await asyncio.get_running_loop().run_in_executor(self._threads, fn, ctx, job.payload)

    async def _drain(self) -> None:
        """Stopping: drop what is queued, let in-flight runs finish within the grace."""
        for queue in self.queues.values():
            queue.clear()
        tasks = set(self._tasks)
        if not tasks:
            return
        log.info("stopping: %d runs in flight", len(tasks))
        _, late = await asyncio.wait(tasks, timeout=self.settings.worker_grace_s)
        for task in late:
            task.cancel()
        if late:
            log.warning("%d runs did not finish within the grace; left to their lease", len(late))
            await asyncio.wait(late)

    # --- record -------------------------------------------------------------------------------

    async def record(self) -> None:
        failures = 0
        batch: list[Finished | Unreadable] = []
        while True:
            if not batch:
                if self.executions_done.is_set() and self.results.empty():
                    break
                try:
                    batch.append(await asyncio.wait_for(self.results.get(), IDLE_WAIT_S))
                except TimeoutError:
                    continue
                await asyncio.sleep(RECORD_LINGER_S)
                while not self.results.empty() and len(batch) < self.settings.worker_batch:
                    batch.append(self.results.get_nowait())
            try:
                await self._settle(batch)
            except RECORD_ERRORS:
                if failures >= len(DB_RETRY_BACKOFF_S):
                    raise
                log.exception("recording %d results failed; retrying", len(batch))
                await asyncio.sleep(DB_RETRY_BACKOFF_S[failures])
                failures += 1
                continue
            failures = 0
            batch = []
        self.recorded.set()

    async def _settle(self, batch: Sequence[Finished | Unreadable]) -> None:
        """Steps 5 to 7 of the module docstring, for a batch."""
        finished = [f for f in batch if isinstance(f, Finished)]
        unreadable = [u for u in batch if isinstance(u, Unreadable)]
        dead = [f for f in finished if f.decision.status is RunStatus.DEAD]
        letters: list[Finished | Unreadable] = [*dead, *unreadable]
        if letters:
            loop = asyncio.get_running_loop()
            failed = await loop.run_in_executor(
                None, publish_reports, self.producer, letters, self._letter
            )
            if failed:
                raise PublishError(failed)
            self.metrics.dlq.labels("dead").inc(len(dead))
            self.metrics.dlq.labels("unreadable").inc(len(unreadable))
        crash_point("worker_after_dlq")
        written = await self.store.write_results(
            [
                ResultRow(
                    f.delivery.run,
                    f.claim.attempt,
                    f.decision.status.value,
                    f.decision.retry_in_ms,
                    f.decision.error,
                )
                for f in finished
            ]
        )
        crash_point("worker_after_results")
        for f in finished:
            d = f.delivery
            outcome = f.decision.status.value if d.run in written else "fenced"
            self.metrics.executions.labels(outcome).inc()
            if outcome == "fenced":
                log.warning(
                    "result of %s fenced out (lease lost)",
                    d.env.run_key,
                    extra={"run_key": d.env.run_key},
                )
            elif outcome == RunStatus.DEAD:  # rare, and on the DLQ: one line per dead run
                log.warning(
                    "run dead after %d attempts",
                    f.claim.attempt,
                    extra={"run_key": d.env.run_key, "error": f.decision.error},
                )
            if self.leased.get(d.run) == f.claim.attempt:
                del self.leased[d.run]
            self.offsets.done(d.tp, d.offset, d.generation)
        for u in unreadable:
            self.offsets.done(u.tp, u.offset, u.generation)
        await self.source.store_positions(self.offsets.advanced())

    def _letter(self, item: Finished | Unreadable, max_bytes: int) -> Outgoing:
        """The DLQ message of a dead run or an unreadable delivery, fitted to `max_bytes`."""
        if isinstance(item, Unreadable):
            return Outgoing(
                self.topics.dlq, value=item.record.fitted(value_room(max_bytes, None)).encode()
            )
        env = item.delivery.env
        headers = env.headers()
        letter = DeadLetter(
            run=env,
            error=item.decision.error or "",
            attempts=item.claim.attempt,
            dead_at=now_ms(),
            worker=self.worker_id,
        )
        return Outgoing(
            self.topics.dlq,
            key=env.job_id,
            value=letter.fitted(value_room(max_bytes, env.job_id, headers)).encode(),
            headers=list(headers),
        )

    # --- heartbeat ----------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        interval_s = self.settings.lease_s / 3
        while not self.recorded.is_set():
            try:
                await asyncio.wait_for(self.recorded.wait(), interval_s)
                break
            except TimeoutError:
                pass
            held = [Attempted(run, attempt) for run, attempt in list(self.leased.items())]
            try:
                await self.store.heartbeat(held)
            except DB_ERRORS:
                # The next beat tries again; a lease that lapses meanwhile fences our write.
                log.warning("heartbeat of %d runs failed", len(held), exc_info=True)


def _differs(env: RunEnvelope, job: JobContent) -> bool:
    return (
        env.handler != job.handler
        or env.target != job.target
        or env.timeout_ms != job.timeout_ms
        or env.payload != job.payload
    )


async def _wait_any(event: asyncio.Event, stop: asyncio.Event, timeout_s: float) -> None:
    waiters = [asyncio.create_task(event.wait()), asyncio.create_task(stop.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def make_worker(
    settings: Settings,
    pool: asyncpg.Pool,
    worker_id: str,
    concurrency: int | None = None,
    metrics: WorkerMetrics | None = None,
) -> Worker:
    from tickwheel.kafka import consumer, producer

    return Worker(
        settings,
        pool,
        consumer(
            settings.effective_kafka,
            worker_group(settings.topic_prefix),
            **{
                "client.id": f"worker-{worker_id}",
                "session.timeout.ms": settings.kafka_session_timeout_ms,
                # Per topic: each priority's partitions are split among the workers. The
                # cooperative-sticky assignor balances only the count over all three topics,
                # so a worker that joined later could get every `normal` partition and the
                # other every `high` one: one worker ran a whole burst while the other idled
                # (measured, docs/BENCHMARKS.md). Range is an eager protocol: a rebalance
                # pauses every member briefly; what is in flight finishes and is recorded.
                "partition.assignment.strategy": WORKER_ASSIGNOR,
            },
        ),
        producer(
            settings.effective_kafka,
            **{"linger.ms": 1, "message.max.bytes": PRODUCER_MESSAGE_MAX_BYTES},
        ),
        worker_id,
        concurrency=concurrency,
        metrics=metrics,
    )


async def serve(
    settings: Settings,
    worker_id: str,
    concurrency: int | None = None,
    metrics_port: int | None = None,
) -> int:
    """Run one worker until SIGTERM/SIGINT (exit 0) or a part's death (exit 1)."""
    from tickwheel import db
    from tickwheel.runtime import tune_gc

    tune_gc()
    metrics = WorkerMetrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.registry)
    size = (concurrency or settings.worker_concurrency) + 4
    pool = await db.create_pool(settings.effective_dsn, min_size=2, max_size=min(size, 20))
    process = Process("worker")
    metrics.registry.register(PartsCollector(process))
    worker = make_worker(settings, pool, worker_id, concurrency, metrics)
    process.on_close(pool.close)
    worker.start(process)
    log.info(
        "worker started",
        extra={
            "worker": worker_id,
            "concurrency": worker.concurrency,
            "handlers": handlers.names(),
        },
    )
    code = await process.run(grace_s=settings.worker_grace_s + 15)
    log.info("worker stopped", extra={"worker": worker_id, "exit": code})
    return code
