"""The `tickwheel worker` process: consume run envelopes, execute, record, then commit.

Parts (each a named task under `tickwheel.runtime.Process`; one that dies stops the process
with exit 1):

    fetch      (workers/fetch.py) polls the three run topics without pause (so a long handler
               never pushes the consumer past max.poll.interval.ms), decodes envelopes into one
               local queue per priority, marks the suspect ones, and pauses a priority's
               partitions while its queue is full
    dispatch   (here) picks deliveries by weighted priority and per-tenant caps for the free
               execution slots (workers/deliveries.py), starts the first deliveries of fresh
               claims at once and claims the others in one UPDATE first, then starts what it
               claimed (workers/execution.py: an async handler that finishes without waiting is
               done before the next pick)
    record     (workers/record.py) writes finished attempts in batches and stores offsets (the
               steps below)
    heartbeat  (workers/holdings.py) every lease/3, extends the lease of every run this
               worker holds marked `running`, and marks so the runs it started without a claim
               a second or more ago
    caps       (workers/tenant_caps.py) every 2 s, reads which tenants have a cluster-wide cap
    watch      (workers/watch.py) every worker_stall_s / 4, asks the broker whether this
               worker still consumes: one that stopped (out of its group, its fetched
               partitions still while messages wait, or a database call under way for the
               whole window) ends for its supervisor to restart it

A delivery's path, and why a crash at any step loses nothing (I4, I5, I7):

    1. received: its offset is tracked as outstanding (tickwheel.kafka.offsets.ContiguousOffsets);
       nothing stored. A message that is no valid envelope jumps to step 5 as an unreadable
       record (it is never executed). A delivery is suspect when it may not be the first of a
       fresh claim (workers/fetch.py says when: a partition's redelivery, a leader's `again`,
       late, unsealed).
    2. started or claimed: the first delivery of a fresh claim (sealed, not suspect, of an
       uncapped tenant) starts at once, with no write: the leader's claim leased the run for
       publishing and running it (I4). A suspect one is claimed first: `pending|published →
       running` WHERE attempt = the envelope's attempt, with this worker's id and a lease; no
       row back: a duplicate or stale delivery, done at once (nothing to write), counted, never
       executed; no row at all: not produced by a scheduler, step 5 as unreadable. A delivery
       of a run this process holds at the same attempt is a copy, done at once: one run key
       never runs twice at once in a process. Runs of a capped tenant are claimed in a
       transaction of their own that claims only what the cap has room for; the others are
       written back to `retrying` (no attempt spent) in that transaction, and their deliveries
       are done once it committed: a crash before that redelivers them, and their claim
       decides again.
    3. executed: the job's handler or HTTP target runs with the job's payload under its
       timeout_ms — a sealed envelope's (tickwheel/run_seal.py: a leader built it from the
       job's row its claim read), else as the claim read them from the job's row (the
       envelope's copy is only compared: a difference is counted and logged, never run). A run
       still in hand a second after its start is marked `running` at the next heartbeat, which
       keeps its lease from then on; so are the runs in hand of partitions a rebalance takes
       away, before they go (workers/holdings.py): the next owner's claim of a redelivery finds them
       taken. A crash here leaves the row dispatched (or `running`); the message's offset was
       not stored, so the next owner of its partition receives it again as a suspect delivery:
       a dispatched run is claimed and runs again under the same attempt (at-least-once; the
       chaos checker attributes it to the dead worker), a `running` one is skipped and its
       lease lapses, and the scheduler's sweeper re-dispatches it as attempt + 1 (or
       dead-letters it when the attempts are spent).
    4. decided (workers/retry.py): succeeded, retrying with full-jitter backoff, or dead (a run
       started without a claim reads its attempt budget and backoff first, in the batch).
    5. for dead runs and unreadable deliveries: the DLQ message is published and its
       delivery confirmed BEFORE anything else. A crash after this and before step 6 leaves
       the row unfinished: its redelivery runs it again (or the sweeper dead-letters it once
       its lease lapses: a second DLQ message; the DLQ is at-least-once, `run_key` plus
       `attempts` identifies duplicates). Writing `dead` first instead would lose the DLQ
       message in that gap. An unreadable delivery has no row: a crash before step 7
       redelivers it and it is published again.
    6. the results are written in one UPDATE fenced by attempt and by the run still being this
       worker's (`running` under it) or still dispatched: the worker's one write of a run
       started without a claim. A crash after this and before step 7 redelivers the message:
       its claim finds the run finished and skips it — no second execution. A result fenced
       out (the lease lapsed and the sweeper moved the run on, or another worker claimed it)
       is dropped and counted as `fenced`; if it was a dead one, its DLQ message went out in
       step 5 anyway (at-least-once: the sweeper may publish one as well).
    7. the delivery is done; each partition's highest contiguous done offset is stored, and
       librdkafka commits stored offsets in the background (and on revocation and close).
       Never a synchronous commit per message.

Shutdown (SIGTERM/SIGINT): fetch stops, queued deliveries are dropped unstarted (their offsets
were not stored: the group redelivers them), in-flight runs get `worker_grace_s` to finish and
be recorded; runs still executing then are cancelled, unrecorded: their next owner runs them
again (a stopped worker's re-execution), or their lease lapses. Then the consumer commits what
was stored and leaves the group; exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Coroutine
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
from tickwheel.deployment import worker_group
from tickwheel.domain import PRIORITIES, RunStatus
from tickwheel.envelopes.dead_letters import UnreadableRun
from tickwheel.envelopes.reports import cut_text
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.offsets import ContiguousOffsets
from tickwheel.kafka.producing import PRODUCER_MESSAGE_MAX_BYTES
from tickwheel.metrics import observe_many
from tickwheel.run_seal import RunSeal
from tickwheel.runtime import Process
from tickwheel.stall import Underway
from tickwheel.topics import Topics
from tickwheel.workers import handlers
from tickwheel.workers.claiming import Claiming
from tickwheel.workers.deliveries import Delivery, Queues, Unreadable
from tickwheel.workers.execution import Execution, Outcome
from tickwheel.workers.fetch import Fetcher, partition_ends
from tickwheel.workers.handlers import Context
from tickwheel.workers.holdings import Holdings
from tickwheel.workers.host_limits import HostLimit, HostLimiter, LimitPolicy
from tickwheel.workers.limit_store import LimitStore
from tickwheel.workers.metrics import PartsCollector, WorkerMetrics
from tickwheel.workers.priorities import WeightedPicker
from tickwheel.workers.record import Failed, Recorder, decided
from tickwheel.workers.store import Claim, JobContent, RunStore
from tickwheel.workers.targets import HttpTargets, TargetPolicy
from tickwheel.workers.tenant_caps import TenantCaps
from tickwheel.workers.watch import ConsumerWatch

log = logging.getLogger("tickwheel.worker")

IDLE_WAIT_S = 0.5  # seconds the dispatcher sleeps when it has nothing to start (or a wake-up)
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
        clients of the broker; `admin` also reads a newly assigned partition's end."""
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
        self.executing = 0
        self.tenant_load: Counter[str] = Counter()  # kept only under a tenant cap
        self._capped = settings.worker_tenant_concurrency > 0
        self.wake = asyncio.Event()
        self.executions_done = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.underway = Underway()  # the database calls under way, for the watch
        self.holdings = Holdings(
            self.store, self.offsets, self.queues, self.metrics, self.underway, settings.lease_s
        )
        self.leased = self.holdings.leased
        self.unmarked = self.holdings.unmarked
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
            # A delivery this long after its record was produced may find the leader's lease
            # lapsed and the run sent again: it takes a claim (a suspect delivery).
            late_ms=max(0, (settings.publish_lease_s - settings.lease_s) * 1000),
            release=self.holdings.release_from_consumer,
            read_ends=partition_ends(admin),
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
            unmarked=self.unmarked,
            finished_unmarked=self.holdings.finished,
            worker_id=worker_id,
            batch_size=settings.worker_batch,
            underway=self.underway,
        )
        self.recorded = self.recorder.done
        self.claiming = Claiming(
            store=self.store,
            underway=self.underway,
            queues=self.queues,
            offsets=self.offsets,
            source=self.source,
            metrics=self.metrics,
            caps=self.caps,
            leased=self.leased,
            hold_ms=settings.tenant_cap_hold_ms,
            start=self._start,
            dead_letter=self._dead_letter,
        )
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
        self.holdings.bind(asyncio.get_running_loop())
        process.spawn("fetch", self.fetcher.run(process.stop, self.wake))
        process.spawn("dispatch", self.dispatch(process.stop))
        process.spawn("record", self.recorder.run(self.executions_done))
        process.spawn("heartbeat", self.holdings.heartbeat(self.recorded))
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
        """Start the first deliveries of fresh claims at once (I4: no write before a run);
        the suspect ones and those of capped tenants take a claim first."""
        capped = self.caps.names
        leased = self.leased
        # A run this process holds already goes the claim's way too: a copy of the same attempt
        # is skipped below, another attempt is claimed (the one in hand will be fenced out).
        fresh = [d for d in picked if not (d.suspect or d.env.tenant in capped or d.run in leased)]
        if fresh:
            self._start_unclaimed(fresh)
            if len(fresh) == len(picked):
                return
            started = {id(d) for d in fresh}
            picked = [d for d in picked if id(d) not in started]
        if any(d.run in leased for d in picked):
            # A delivery of a run this process holds at the same attempt is a copy: never two
            # executions of one run key at once in a process (I4); its claim would succeed
            # while the first is unmarked.
            copies = [d for d in picked if leased.get(d.run) == d.env.attempt]
            if copies:
                picked = [d for d in picked if leased.get(d.run) != d.env.attempt]
                self._skip_copies(copies)
                if not picked:
                    return
        await self.claiming.claim(picked)

    def _start_unclaimed(self, fresh: list[Delivery]) -> None:
        """Start deliveries without a claim: each is the first delivery of its claim, its
        seal opened, its tenant uncapped. The run is this worker's until its result is
        written; a heartbeat marks it `running` should it last (`heartbeat`)."""
        started = now_ms()
        leased, unmarked = self.leased, self.unmarked
        lateness: list[float] = []
        copies: list[Delivery] = []
        new = tuple.__new__
        for d in fresh:
            env = d.env
            run = d.run
            if run in leased:  # held already (a copy of the delivery): never run twice at once
                copies.append(d)
                continue
            claim: Claim = new(
                Claim,
                (env.tenant, env.job_id, env.scheduled_at, env.attempt, None, started,
                 None, None, None, None, None, None),
            )  # fmt: skip
            leased[run] = env.attempt
            unmarked[run] = (d, started)
            # From the instant the run was due: a jittered run's is after its scheduled one.
            due = env.scheduled_at if env.due is None else env.due
            lateness.append(max(0, started - due) / 1000)
            self._start(d, claim)
        if lateness:
            observe_many(self.metrics.start_lateness, lateness)
            self.metrics.started_unclaimed.inc(len(lateness))
        if copies:
            self._skip_copies(copies)

    def _skip_copies(self, copies: list[Delivery]) -> None:
        """Copies of deliveries in hand are done at once: the run in hand writes the result."""
        self.metrics.skipped.labels("duplicate").inc(len(copies))
        self.offsets.done_many([(d.tp, d.offset, d.generation) for d in copies])

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
            self.unmarked.pop(d.run, None)
            self.holdings.finished.discard(d.run)
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
        if d.run in self.unmarked:
            self.holdings.finished.add(d.run)  # not to be marked: its result is on its way
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
    from tickwheel.kafka.clients import admin_client, consumer, producer

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
                # (D-170). Range is an eager protocol: a rebalance
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
