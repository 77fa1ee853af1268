"""The `tickwheel worker` process: consume run envelopes, claim, execute, record, then commit.

Parts (each a named task under `tickwheel.runtime.Process`; one that dies stops the process
with exit 1):

    fetch      (workers/fetch.py) polls the three run topics without pause (so a long handler
               never pushes the consumer past max.poll.interval.ms), decodes envelopes into one
               local queue per priority, and pauses a priority's partitions while its queue is
               full
    dispatch   (here) picks deliveries by weighted priority and per-tenant caps for the free
               execution slots (workers/deliveries.py), claims them in one UPDATE, starts the
               claimed (workers/execution.py: an async handler that finishes without waiting is
               done before the next pick)
    record     (workers/record.py) writes finished attempts in batches and stores offsets (the
               steps below)
    heartbeat  (here) every lease/3, extends the lease of every run this worker holds
    caps       (workers/tenant_caps.py) every 2 s, reads which tenants have a cluster-wide cap
    watch      (workers/watch.py) every worker_stall_s / 4, asks the broker whether this
               worker still consumes: one that stopped (out of its group, its fetched
               partitions still while messages wait, or a database call under way for the
               whole window) ends for its supervisor to restart it

A delivery's path, and why a crash at any step loses nothing (I4, I5, I7):

    1. received: its offset is tracked as outstanding (tickwheel.kafka.ContiguousOffsets);
       nothing stored. A message that is no valid envelope jumps to step 5 as an unreadable
       record (it is never executed).
    2. claimed: `pending|published → running` WHERE attempt = the envelope's attempt, with
       this worker's id and a lease. No row back: a duplicate or stale delivery: it is done
       at once (nothing to write), counted, and never executed. A delivery naming no run at
       all (no row) was not produced by a scheduler: it goes to step 5 as unreadable. Runs of
       a capped tenant are claimed in a transaction of their own that claims only what the
       cap has room for; the others are written back to `retrying` (no attempt spent) in that
       transaction, and their deliveries are done once it committed: a crash before that
       redelivers them, and their claim decides again.
    3. executed: the job's handler or HTTP target runs with the job's payload under its
       timeout_ms — a sealed envelope's (tickwheel/run_seal.py: a leader built it from the
       job's row its claim read, and the worker's claim read no row), else as the claim read
       them from the job's row (the envelope's copy is only compared: a difference is counted
       and logged, never run); the heartbeat keeps the lease while it runs. A crash here
       leaves the row `running`; its lease lapses and the scheduler's sweeper re-dispatches
       it as attempt + 1 (or dead-letters it when the attempts are spent). The message's
       offset was not stored, so it is redelivered too; its claim then finds attempt + 1 (or
       a finished row) and skips it.
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
import uuid
from collections import Counter
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
from confluent_kafka import (
    Consumer,
    Producer,
)
from confluent_kafka.admin import AdminClient

from tickwheel.clock import now_ms
from tickwheel.config import Settings
from tickwheel.db import DB_ERRORS
from tickwheel.deployment import worker_group
from tickwheel.domain import PRIORITIES, RunStatus
from tickwheel.envelopes import RunEnvelope, UnreadableRun, cut_text
from tickwheel.kafka import (
    PRODUCER_MESSAGE_MAX_BYTES,
    ContiguousOffsets,
)
from tickwheel.metrics import observe_many
from tickwheel.run_seal import RunSeal
from tickwheel.runtime import Process
from tickwheel.stall import Underway
from tickwheel.topics import Topics
from tickwheel.workers import handlers
from tickwheel.workers.deliveries import Delivery, Queues, Unreadable
from tickwheel.workers.execution import Execution, Outcome
from tickwheel.workers.fetch import Fetcher
from tickwheel.workers.handlers import Context
from tickwheel.workers.host_limits import HostLimit, HostLimiter, LimitPolicy
from tickwheel.workers.limit_store import LimitStore
from tickwheel.workers.metrics import PartsCollector, WorkerMetrics
from tickwheel.workers.priorities import WeightedPicker
from tickwheel.workers.record import Failed, Recorder, decided
from tickwheel.workers.store import Claim, JobContent, Keys, RunId, RunStore
from tickwheel.workers.targets import HttpTargets, TargetPolicy
from tickwheel.workers.tenant_caps import TenantCaps
from tickwheel.workers.watch import ConsumerWatch

log = logging.getLogger("tickwheel.worker")

IDLE_WAIT_S = 0.5  # seconds the dispatcher sleeps when it has nothing to start (or a wake-up)
# A claim that fails for want of the database waits this long before the next try (the
# deliveries wait in their queue meanwhile), growing while it keeps failing.
DB_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0)
WORKER_ASSIGNOR = "range"  # see make_worker
SUCCEEDED = RunStatus.SUCCEEDED.value


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def client_id(worker_id: str) -> str:
    """The worker's consumer's client.id: how its group's member list names it."""
    return f"worker-{worker_id}"


class Worker:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        consumer: Consumer,
        producer: Producer,
        worker_id: str,
        *,
        probe: Consumer,
        admin: AdminClient,
        concurrency: int | None = None,
        metrics: WorkerMetrics | None = None,
        run_seal: RunSeal | None = None,
    ) -> None:
        """`run_seal`: the deployment's run seal (tickwheel/run_seal.py); None: no delivery
        counts as sealed, and every claim reads what to run from the job's row. `probe` (a
        consumer of the workers' group that never subscribes) and `admin`: the watch's own
        clients of the broker."""
        self.settings = settings
        self.worker_id = worker_id
        self.concurrency = concurrency or settings.worker_concurrency
        self.metrics = metrics or WorkerMetrics()
        self.topics = Topics(settings.topic_prefix)
        self.store = RunStore(pool, worker_id, settings.lease_s * 1000)
        self.producer = producer
        self.offsets = ContiguousOffsets()
        self.queues = Queues(
            WeightedPicker(settings.priority_weights, settings.worker_high_reserved_slots),
            settings.worker_tenant_concurrency,
            self.offsets.generation,
        )
        limit_store = LimitStore(pool, worker_id)
        self.hosts = HostLimiter(
            limit_store,
            LimitPolicy(
                default=HostLimit(settings.target_rate_per_s, settings.target_burst),
                per_host={
                    key: HostLimit(limit.rate_per_s, limit.burst)
                    for key, limit in settings.target_limits.items()
                },
                breaker_failures=settings.target_breaker_failures,
                breaker_cooldown_s=settings.target_breaker_cooldown_s,
            ),
            self.metrics,
        )
        self.targets = HttpTargets(TargetPolicy(tuple(settings.target_allowlist)), self.hosts)
        self.caps = TenantCaps(limit_store, self.metrics)
        self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="handler")
        self.execution = Execution(self._threads, self.targets)
        self.leased: dict[RunId, int] = {}  # runs held (executing or awaiting their write)
        self.executing = 0
        self.tenant_load: Counter[str] = Counter()  # kept only under a tenant cap
        self._capped = settings.worker_tenant_concurrency > 0
        self.wake = asyncio.Event()
        self.executions_done = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._claim_failures = 0  # claims failed in a row (the database unavailable)
        self.underway = Underway()  # the database calls under way, for the watch
        self.metrics.in_flight.set_function(lambda: self.executing)
        self.fetcher = Fetcher(
            consumer,
            self.topics,
            batch_size=settings.worker_batch,
            queue_cap=settings.worker_queue_per_priority,
            offsets=self.offsets,
            queues=self.queues,
            metrics=self.metrics,
            dead_letter=self._dead_letter,
            run_seal=run_seal,
        )
        self.source = self.fetcher.source
        self.recorder = Recorder(
            store=self.store,
            producer=producer,
            source=self.source,
            offsets=self.offsets,
            topics=self.topics,
            metrics=self.metrics,
            leased=self.leased,
            worker_id=worker_id,
            batch_size=settings.worker_batch,
            underway=self.underway,
        )
        self.recorded = self.recorder.done
        self.watch = ConsumerWatch(
            self.source,
            lambda: {self.topics.runs(level) for level in self.fetcher.paused},
            [self.topics.runs(level) for level in PRIORITIES],
            probe,
            admin,
            worker_group(settings.topic_prefix),
            client_id(worker_id),
            self.underway,
            settings.worker_stall_s,
        )

    def start(self, process: Process) -> None:
        process.spawn("fetch", self.fetcher.run(process.stop, self.wake))
        process.spawn("dispatch", self.dispatch(process.stop))
        process.spawn("record", self.recorder.run(self.executions_done))
        process.spawn("heartbeat", self.heartbeat())
        process.spawn("caps", self.caps.run(process.stop))
        process.spawn("watch", self.watch.run(process.stop))
        process.on_close(self.close)

    async def close(self) -> None:
        """Commit the stored offsets and leave the group; release clients and threads."""
        try:
            await self.source.close()
        finally:
            await self.watch.close()
            await self.targets.close()
            self._threads.shutdown(wait=False, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, 10)

    def _dead_letter(
        self, tp: tuple[str, int], offset: int, generation: int, raw: bytes, reason: str
    ) -> None:
        """A message never to execute goes to the DLQ as unreadable, with its bytes (step 5)."""
        record = UnreadableRun(reason, tp[0], tp[1], offset, raw, self.worker_id, now_ms())
        self.recorder.add_unreadable(Unreadable(tp, offset, generation, record))

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
        capped = self.caps.names
        if capped:  # runs of capped tenants take the capped claim (workers/tenant_caps.py)
            under_cap = [d for d in picked if d.env.tenant in capped]
            if under_cap:
                rest = [d for d in picked if d.env.tenant not in capped]
                if rest:
                    await self._claim_uncapped(rest)
                await self._claim_batch(under_cap, sorted({d.env.tenant for d in under_cap}))
                return
        await self._claim_uncapped(picked)

    async def _claim_uncapped(self, picked: list[Delivery]) -> None:
        """Sealed deliveries take the claim that reads no job row; the others the one that
        reads what to run from it (tickwheel/run_seal.py)."""
        sealed = [d for d in picked if d.sealed]
        if len(sealed) == len(picked):
            await self._claim_batch(picked, None, sealed=True)
            return
        if sealed:
            await self._claim_batch(sealed, None, sealed=True)
            picked = [d for d in picked if not d.sealed]
        await self._claim_batch(picked, None)

    async def _claim_batch(
        self, picked: list[Delivery], capped: list[str] | None, sealed: bool = False
    ) -> None:
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
            with self.underway.call("claim"):
                claims, refused = await self.store.claim_isolating(
                    keys,
                    None if capped is None else (capped, self.settings.tenant_cap_hold_ms),
                    sealed,
                )
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
        held: list[Delivery] = []
        lateness: list[float] = []
        opened = 0  # claimed deliveries whose seal opened: their envelope's content runs
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
                if claim is None and d.run in claims:
                    del claims[d.run]
                    held.append(d)
                else:
                    unclaimed.append(d)
                continue
            del claims[d.run]  # a second delivery of this attempt in the batch is a duplicate
            lateness.append(max(0, claim.started_ms - env.scheduled_at) / 1000)
            self.leased[d.run] = claim.attempt
            opened += d.sealed
            self._start(d, claim)
        if lateness:
            observe_many(self.metrics.start_lateness, lateness)
            if opened:
                self.metrics.claimed.labels("sealed").inc(opened)
            if opened < len(lateness):
                self.metrics.claimed.labels("job_row").inc(len(lateness) - opened)
        if held:
            await self._held(held)
        if unclaimed:
            await self._skip(unclaimed)

    async def _held(self, held: Sequence[Delivery]) -> None:
        """Deliveries of runs their tenant's cap held back: the hold is written (the claim's
        transaction committed), so they are done (I5); the leader dispatches the runs again."""
        for tenant, count in Counter(d.env.tenant for d in held).items():
            self.metrics.tenant_held.labels(tenant).inc(count)
        self.offsets.done_many([(d.tp, d.offset, d.generation) for d in held])
        await self.source.store_positions(self.offsets.advanced())

    def _start(self, d: Delivery, claim: Claim) -> None:
        """Step 3: run the job's content; an attempt over at once is recorded at once."""
        env = d.env
        job: JobContent | None
        if d.sealed:  # a leader built it from the job's row: it is what runs
            job = JobContent(env.handler, env.target, env.payload, env.timeout_ms)
        else:
            job = claim.content()
        if job is not None and not d.sealed and _differs(env, job):
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
            self.recorder.add_finished((d, claim, SUCCEEDED, None, None), outcome.seconds)
            return
        # An exception's message can be as large as the handler likes: the row and the dead
        # letter keep its start.
        error = cut_text(outcome.error)
        if claim.backoff_base_ms is None or claim.backoff_cap_ms is None:
            # A sealed claim read no job row: the recorder reads the backoff, then decides.
            self.recorder.add_failed(Failed(d, claim, error, outcome.permanent), outcome.seconds)
            return
        base_ms, cap_ms = claim.backoff_base_ms, claim.backoff_cap_ms
        self.recorder.add_finished(
            decided(d, claim, error, outcome.permanent, base_ms, cap_ms), outcome.seconds
        )

    async def _skip(self, unclaimed: Sequence[Delivery]) -> None:
        """Deliveries that claimed nothing are done at once; say why in the metrics."""
        try:
            with self.underway.call("status read"):
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
                with self.underway.call("heartbeat"):
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
    run_seal: RunSeal | None = None,
) -> Worker:
    from tickwheel.kafka import admin_client, consumer, producer

    group = worker_group(settings.topic_prefix)
    return Worker(
        settings,
        pool,
        consumer(
            settings.effective_kafka,
            group,
            **{
                "client.id": client_id(worker_id),
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
        # The watch's probe: the same group, never subscribed, committing nothing.
        probe=consumer(
            settings.effective_kafka,
            group,
            **{"client.id": f"{client_id(worker_id)}-probe", "enable.auto.commit": False},
        ),
        admin=admin_client(settings.effective_kafka),
        concurrency=concurrency,
        metrics=metrics,
        run_seal=run_seal,
    )


async def serve(
    settings: Settings,
    worker_id: str,
    concurrency: int | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Run one worker until SIGTERM/SIGINT (exit 0) or a part's death (exit 1)."""
    from tickwheel import db
    from tickwheel.runtime import tune_gc

    tune_gc()
    metrics = WorkerMetrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr=metrics_host, registry=metrics.registry)
    size = (concurrency or settings.worker_concurrency) + 4
    pool = await db.create_pool(
        settings.effective_dsn,
        min_size=2,
        max_size=min(size, 20),
        server_settings=db.KEYED_LOOKUPS,
        reset_sessions=False,
    )
    # No run of a database of another deployment is executed (D-048).
    try:
        await db.check_deployment(pool, settings.topic_prefix, "worker")
    except BaseException:
        await pool.close()
        raise
    process = Process("worker")
    metrics.registry.register(PartsCollector(process))
    worker = make_worker(
        settings, pool, worker_id, concurrency, metrics, run_seal=await db.run_seal(pool)
    )
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
