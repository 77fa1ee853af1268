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
from collections import Counter
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tickwheel.clock import now_ms
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
from tickwheel.metrics import observe_many
from tickwheel.runtime import Process
from tickwheel.topics import Topics
from tickwheel.workers import handlers
from tickwheel.workers.deliveries import Delivery, Queues, Unreadable
from tickwheel.workers.execution import Execution, Outcome
from tickwheel.workers.handlers import Context
from tickwheel.workers.metrics import PartsCollector, WorkerMetrics
from tickwheel.workers.priorities import WeightedPicker
from tickwheel.workers.retry import decide
from tickwheel.workers.store import Claim, JobContent, Keys, Results, RunId, RunStore
from tickwheel.workers.targets import HttpTargets, TargetPolicy

log = logging.getLogger("tickwheel.worker")

FETCH_POLL_S = 0.05  # seconds one fetch waits for messages
IDLE_WAIT_S = 0.5  # seconds the dispatcher sleeps when it has nothing to start (or a wake-up)
LAG_EVERY_S = 1.0  # seconds between per-partition lag reports (cached watermarks: cheap)
# What a failed result write raises: the database, or the broker refusing a dead letter.
RECORD_ERRORS: tuple[type[BaseException], ...] = (*DB_ERRORS, PublishError)
DB_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0)  # then the process dies (I9)
RECORD_LINGER_S = 0.005  # after a first result, gather others finishing this long
WORKER_ASSIGNOR = "range"  # see make_worker
SUCCEEDED = RunStatus.SUCCEEDED.value

# A finished attempt on its way to the result write: the delivery, the claim, the status,
# the retry delay (retrying) and the error.
Finished = tuple[Delivery, Claim, str, "int | None", "str | None"]


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


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
        self.queues = Queues(
            WeightedPicker(settings.priority_weights, settings.worker_high_reserved_slots),
            settings.worker_tenant_concurrency,
            self.offsets.generation,
        )
        self.targets = HttpTargets(
            TargetPolicy(
                allowlist=tuple(settings.target_allowlist),
                rate_per_s=settings.target_rate_per_s,
                burst=settings.target_burst,
                breaker_failures=settings.target_breaker_failures,
                breaker_cooldown_s=settings.target_breaker_cooldown_s,
            )
        )
        self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="handler")
        self.execution = Execution(self._threads, self.targets)
        self.leased: dict[RunId, int] = {}  # runs held (executing or awaiting their write)
        self.executing = 0
        self.tenant_load: Counter[str] = Counter()  # kept only under a tenant cap
        self._capped = settings.worker_tenant_concurrency > 0
        # Finished attempts and unreadable deliveries waiting for `record`, in arrival order.
        self._finished: list[Finished] = []
        self._unreadable: list[Unreadable] = []
        self._durations: list[float] = []  # handler seconds of the finished attempts
        self._to_record = asyncio.Event()
        self.wake = asyncio.Event()
        self.executions_done = asyncio.Event()
        self.recorded = asyncio.Event()
        self.paused: set[str] = set()
        self._assignment_changed = False
        self._revoked = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._lag_labels: set[tuple[str, str]] = set()
        self._claim_failures = 0  # claims failed in a row (the database unavailable)
        self.metrics.in_flight.set_function(lambda: self.executing)
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
            if messages:
                self._receive(messages)
            if self._revoked:
                self._revoked = False
                self.queues.drop_revoked()
            await self._apply_pauses()
            if messages:
                self.wake.set()
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
                queues[level].append(Delivery(tp, offset, generation, level, env, published, raw))
                continue
            log.warning("unreadable run message %s[%d]@%d: %s", *tp, offset, reason)
            self._dead_letter(tp, offset, generation, raw, reason)

    def _dead_letter(
        self, tp: tuple[str, int], offset: int, generation: int, raw: bytes, reason: str
    ) -> None:
        """A message never to execute goes to the DLQ as unreadable, with its bytes (step 5)."""
        record = UnreadableRun(reason, tp[0], tp[1], offset, raw, self.worker_id, now_ms())
        self._unreadable.append(Unreadable(tp, offset, generation, record))
        self._to_record.set()

    async def _apply_pauses(self) -> None:
        cap = self.settings.worker_queue_per_priority
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
            picked = self.queues.pick(self.concurrency - self.executing, self.tenant_load)
            if not picked:
                await _wait_any(self.wake, stop, IDLE_WAIT_S)
                continue
            await self._claim_and_start(picked)
        await self._drain()
        self.executions_done.set()

    async def _claim_and_start(self, picked: list[Delivery]) -> None:
        # Two deliveries of one run may carry different attempts (a stale one and its
        # re-dispatch): both are asked for, at most one can match the row.
        keys = Keys()
        asked: set[tuple[RunId, int]] = set()
        for d in picked:
            wanted = (d.run, d.env.attempt)
            if wanted not in asked:
                asked.add(wanted)
                keys.add(d.run, d.env.attempt, d.published_ms)
        try:
            claims, refused = await self.store.claim_isolating(keys)
        except DB_ERRORS as exc:
            self._claim_failures += 1
            pause_s = DB_RETRY_BACKOFF_S[min(self._claim_failures, len(DB_RETRY_BACKOFF_S)) - 1]
            if self._claim_failures == 1:
                log.exception("claiming %d runs failed; they wait in the queue", len(keys))
            else:  # one traceback per outage, not one per attempt
                log.warning(
                    "claiming %d runs failed again (%d in a row; next try in %.1f s): %s",
                    len(keys),
                    self._claim_failures,
                    pause_s,
                    exc,
                )
            self.queues.put_back(picked)
            await asyncio.sleep(pause_s)
            return
        self._claim_failures = 0
        unclaimed: list[Delivery] = []
        lateness: list[float] = []
        for d in picked:
            env = d.env
            if refused:
                reason = refused.get((d.run, env.attempt))
                if reason is not None:
                    log.warning(
                        "delivery of %s refused by the database; dead-lettered", env.run_key
                    )
                    self._dead_letter(d.tp, d.offset, d.generation, d.raw, reason)
                    continue
            claim = claims.get(d.run)
            if claim is None or claim.attempt != env.attempt:
                unclaimed.append(d)
                continue
            del claims[d.run]  # a second delivery of this attempt in the batch is a duplicate
            lateness.append(max(0, claim.started_ms - env.scheduled_at) / 1000)
            self.leased[d.run] = claim.attempt
            self._start(d, claim)
        if lateness:
            observe_many(self.metrics.start_lateness, lateness)
        if unclaimed:
            await self._skip(unclaimed)

    def _start(self, d: Delivery, claim: Claim) -> None:
        """Step 3: run the job's content; an attempt over at once is recorded at once."""
        env = d.env
        job = claim.content()
        if job is not None and _differs(env, job):
            self.metrics.envelope_mismatch.inc()
            log.warning(
                "envelope of %s differs from its job's content; the job's runs",
                env.run_key,
                extra={"run_key": env.run_key},
            )
        ctx = Context.of_run(env.run_key, env.tenant, env.job_id, env.scheduled_at, claim.attempt)
        begun = self.execution.begin(job, ctx)
        if isinstance(begun, Outcome):
            self._finish(d, claim, begun)
            return
        self.executing += 1
        if self._capped:
            self.tenant_load[env.tenant] += 1
        task = asyncio.create_task(self._await_run(d, claim, begun), name=f"run {env.run_key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _await_run(
        self, d: Delivery, claim: Claim, running: Coroutine[Any, Any, Outcome]
    ) -> None:
        try:
            outcome = await running
        except asyncio.CancelledError:
            # Shutdown past its grace: no result; the lease lapses and the scheduler moves on.
            self.leased.pop(d.run, None)
            raise
        finally:
            self.executing -= 1
            if self._capped:
                tenant = d.env.tenant
                self.tenant_load[tenant] -= 1
                if self.tenant_load[tenant] <= 0:
                    del self.tenant_load[tenant]
            self.wake.set()
        self._finish(d, claim, outcome)

    def _finish(self, d: Delivery, claim: Claim, outcome: Outcome) -> None:
        """Step 4: what the attempt becomes, queued for `record`."""
        if outcome.error is None:
            self._finished.append((d, claim, SUCCEEDED, None, None))
        else:
            decision = decide(
                # An exception's message can be as large as the handler likes: the row and
                # the dead letter keep its start.
                error=cut_text(outcome.error),
                permanent=outcome.permanent,
                attempt=claim.attempt,
                max_attempts=claim.max_attempts,
                base_ms=claim.backoff_base_ms,
                cap_ms=claim.backoff_cap_ms,
            )
            self._finished.append(
                (d, claim, decision.status.value, decision.retry_in_ms, decision.error)
            )
        self._durations.append(outcome.seconds)
        self._to_record.set()

    async def _skip(self, unclaimed: Sequence[Delivery]) -> None:
        """Deliveries that claimed nothing are done at once; say why in the metrics."""
        try:
            found = await self.store.statuses([d.run for d in unclaimed])
        except DB_ERRORS:
            found = None  # the reason is only for the metrics; the skip stands
        done = []
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
            done.append((d.tp, d.offset, d.generation))
        self.offsets.done_many(done)
        await self.source.store_positions(self.offsets.advanced())

    async def _drain(self) -> None:
        """Stopping: drop what is queued, let in-flight runs finish within the grace."""
        self.queues.clear()
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
        finished: list[Finished] = []
        unreadable: list[Unreadable] = []
        while True:
            if not finished and not unreadable:
                if self.executions_done.is_set() and not self._finished and not self._unreadable:
                    break
                if not self._finished and not self._unreadable:
                    self._to_record.clear()
                    try:
                        await asyncio.wait_for(self._to_record.wait(), IDLE_WAIT_S)
                    except TimeoutError:
                        continue
                    await asyncio.sleep(RECORD_LINGER_S)
                finished, unreadable = self._take_batch()
            try:
                await self._settle(finished, unreadable)
            except RECORD_ERRORS:
                if failures >= len(DB_RETRY_BACKOFF_S):
                    raise
                log.exception(
                    "recording %d results failed; retrying", len(finished) + len(unreadable)
                )
                await asyncio.sleep(DB_RETRY_BACKOFF_S[failures])
                failures += 1
                continue
            failures = 0
            finished, unreadable = [], []
        self.recorded.set()

    def _take_batch(self) -> tuple[list[Finished], list[Unreadable]]:
        """Up to `worker_batch` of what waits for `record`, oldest first; and their durations
        go to the metrics."""
        size = self.settings.worker_batch
        finished, self._finished = self._finished[:size], self._finished[size:]
        unreadable, self._unreadable = self._unreadable[:size], self._unreadable[size:]
        durations, self._durations = self._durations, []
        if durations:
            observe_many(self.metrics.handler_seconds, durations)
        return finished, unreadable

    async def _settle(self, finished: list[Finished], unreadable: list[Unreadable]) -> None:
        """Steps 5 to 7 of the module docstring, for a batch."""
        dead = [f for f in finished if f[2] == RunStatus.DEAD]
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
        results = Results()
        for d, claim, status, retry_in_ms, error in finished:
            results.add(d.run, claim.attempt, status, retry_in_ms, error)
        written = await self.store.write_results(results)
        crash_point("worker_after_results")
        outcomes: Counter[str] = Counter()
        done = []
        leased = self.leased
        for d, claim, status, _, error in finished:
            run = d.run
            if run in written:
                outcomes[status] += 1
                if status == RunStatus.DEAD:  # rare, and on the DLQ: one line per dead run
                    log.warning(
                        "run dead after %d attempts",
                        claim.attempt,
                        extra={"run_key": d.env.run_key, "error": error},
                    )
            else:
                outcomes["fenced"] += 1
                log.warning(
                    "result of %s fenced out (lease lost)",
                    d.env.run_key,
                    extra={"run_key": d.env.run_key},
                )
            if leased.get(run) == claim.attempt:
                del leased[run]
            done.append((d.tp, d.offset, d.generation))
        for outcome, count in outcomes.items():
            self.metrics.executions.labels(outcome).inc(count)
        done.extend((u.tp, u.offset, u.generation) for u in unreadable)
        self.offsets.done_many(done)
        await self.source.store_positions(self.offsets.advanced())

    def _letter(self, item: Finished | Unreadable, max_bytes: int) -> Outgoing:
        """The DLQ message of a dead run or an unreadable delivery, fitted to `max_bytes`."""
        if isinstance(item, Unreadable):
            return Outgoing(
                self.topics.dlq, value=item.record.fitted(value_room(max_bytes, None)).encode()
            )
        d, claim, _, _, error = item
        env = d.env
        headers = env.headers()
        letter = DeadLetter(
            run=env,
            error=error or "",
            attempts=claim.attempt,
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
            held = Keys()
            for run, attempt in list(self.leased.items()):
                held.add(run, attempt)
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
    pool = await db.create_pool(
        settings.effective_dsn,
        min_size=2,
        max_size=min(size, 20),
        server_settings=db.KEYED_LOOKUPS,
        reset_sessions=False,
    )
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
