"""One shard's leader: its timing wheel, the tick loop, the fenced claim, publish and sweeper.

Lifecycle (`LeaderState`; the process's election in `election.py` moves the first and last
steps, this module the rest):

    FOLLOWER ──ZooKeeper shard node created──► TAKING_OVER
        bump shard_leaders.epoch and set owner (I2), read the feed position, load the horizon
    TAKING_OVER ──loaded──► LEADING(epoch)
        tick: claim what is due, publish, sweep; the change feed keeps the wheel current
    LEADING ──ZooKeeper SUSPENDED──► SUSPENDED       dispatching stops at once, the wheel is kept
    SUSPENDED ──CONNECTED (same session)──► LEADING  nobody else can have taken the shard
    SUSPENDED|LEADING ──session LOST──► LOST         the wheel is dropped; the process rejoins
    LEADING ──fence refused a transaction──► LOST    another epoch owns the shard (we were
                                                      paused past our session): step down
    LEADING ──rebalance / shutdown──► FOLLOWER        finish the batch in hand, clear the owner,
                                                      delete the shard node

The claim/publish loop, for the entries `wheel.advance(now)` returns (now: the database's
clock, `dbclock.py`), in batches drawn fairly between tenants (`fairness.py`), each taken when
the process's claim combiner grants this leader a turn (`claims.py`, D-271):

    1. plan (`plan.py`): misfire and overlap per job, the next occurrence from the cache;
    2. one statement, shared with the process's other leaders' claims and fenced per shard
       (I2): `claim_due` reads each due job by its key and inserts the run rows of the jobs
       still active at the version the wheel loaded (I3; ON CONFLICT DO NOTHING); the pending
       rows carry a lease that covers publishing and running them (I4); the job's row is not
       written: where its schedule stands is queued for `positions.py` (D-269);
    3. publish the envelopes of the pending rows and wait for the broker's acks (I1); runs
       the broker refused are kept and published again at the next sweep, same attempt.
    The row is not written again before the worker's result (D-268).

Why a crash at any step loses nothing and runs nothing twice in effect:
    - before 2 commits: nothing was written; the next leader (or this one after a restart)
      loads the job as due (its position derived from its runs, `horizon_jobs`) and claims
      it, late, under the job's misfire policy;
    - after 2, before 3 (crash point `scheduler_after_claim`): the pending rows are the outbox;
      the next leader of the shard adopts them at its takeover (`outbox_adopt`: pending rows
      of an earlier epoch) and publishes them with the same attempt and the header `again`;
    - after 3 (crash point `scheduler_after_publish`): the runs are on Kafka and still
      `pending`; the next leader adopts and publishes them once more with the header `again`,
      and a worker claims such a copy before it runs it (`pending|published → running` at
      the attempt), so only one delivery runs (I4);
    - the claim is keyed by the run key, so repeating it never creates a second row for one
      occurrence.

The wheel, what the leader knows of the jobs out of it, and the horizon's loading, extension
and re-sync are `horizon.py` (`HorizonHolding`, a part of this class).

The sweeper (`sweeper.py`, every `sweep_interval_ms`, fenced like the claim) publishes again
what lapsed or was adopted, dead-letters runs whose worker lease lapsed on their last attempt,
loads `retrying` runs into the wheel (claimed when due with `retries_claim`, I6; triggers and
backfills are such runs at attempt 0, whose first claim applies the job's overlap policy,
`plan_first_dispatch`; the registry's NOTIFY `tickwheel_runs`, through the feed and
`hint_retries`, has them loaded at once) and releases runs buffered by overlap `buffer_one`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import asyncpg

from tickwheel import db as dbmod
from tickwheel.crash_points import crash_point
from tickwheel.domain import RunStatus
from tickwheel.kafka.producing import PublishError
from tickwheel.queries import QUERIES
from tickwheel.schedule import REASON_OVERLAP, ScheduleCache
from tickwheel.shards import store
from tickwheel.shards.calendars import CalendarBook
from tickwheel.shards.claims import ClaimCombiner
from tickwheel.shards.dbclock import DbClock
from tickwheel.shards.fairness import TenantQueue
from tickwheel.shards.horizon import HorizonHolding, retry_key
from tickwheel.shards.metrics import SchedulerMetrics, observe_many
from tickwheel.shards.outbox import Outbox
from tickwheel.shards.plan import (
    NO_NEXT_MS,
    JobEntry,
    RetryEntry,
    deleted_at_end,
    plan_claims,
    plan_first_dispatch,
)
from tickwheel.shards.positions import Position, Positions
from tickwheel.shards.store import Dispatch, FencedOut, Lease
from tickwheel.shards.sweeper import Sweeper
from tickwheel.shards.window import DispatchWindow
from tickwheel.wheel import TimingWheel

log = logging.getLogger("tickwheel.scheduler.leader")

WHEEL_TICK_MS = 1  # exact to the millisecond (docs/DECISIONS.md D-034)
WHEEL_SIZE = 256
RETRY_BACKOFF_S = 1.0  # seconds a leader waits after a failed database round trip
# Publishes of runs that may have gone out before: a worker claims them before it runs them.
SENT_AGAIN = frozenset({"unacked", "adopted", "republish"})
UNBLOCK_CONNECT_TIMEOUT_S = 10.0  # seconds to open (and close) the connection that ends blockers
# A periodic step (sweep, re-sync) that fails so is logged and tried again at its next turn.
STEP_ERRORS: tuple[type[BaseException], ...] = (*store.DB_ERRORS, PublishError)


class LeaderState(StrEnum):
    FOLLOWER = "follower"
    TAKING_OVER = "taking_over"
    LEADING = "leading"
    SUSPENDED = "suspended"
    LOST = "lost"


@dataclass(frozen=True)
class LeaderConfig:
    """Timing settings of every leader of a process (milliseconds unless named otherwise)."""

    tick_ms: int
    horizon_ms: int
    publish_lease_ms: int
    claim_batch: int
    sweep_ms: int
    resync_ms: int  # the whole horizon re-read (a safety net): `_resync`
    extend_ms: int = 5_000  # the horizon's end moved on, the newly covered slice loaded
    retention_days: int = 30  # run history kept by the daily gc (shard 0's leader)


@dataclass
class Shared:
    """What the leaders of one process share."""

    owner: str
    config: LeaderConfig
    pool: asyncpg.Pool
    outbox: Outbox
    cache: ScheduleCache
    clock: DbClock
    metrics: SchedulerMetrics
    on_leading: Callable[[ShardLeader], None] | None = None  # the feed attaches the shard
    # For a connection outside the pool: a takeover blocked by a frozen predecessor must not
    # wait for a pooled connection that other blocked takeovers hold (`_end_blockers`).
    dsn: str = ""
    # Bounds each tenant's runs claimed and not finished; the default bounds nothing.
    window: DispatchWindow = field(default_factory=lambda: DispatchWindow(0, 1.0, 1))
    # The leaders' claims, combined while one is under way (`claims.py`).
    claims: ClaimCombiner = field(init=False)
    # Where the claimed jobs' schedules stand, written off the claim (`positions.py`).
    positions: Positions = field(init=False)
    # The tenants' exclusion calendars, loaded before any shard is led (`calendars.py`).
    calendars: CalendarBook = field(default_factory=CalendarBook)

    def __post_init__(self) -> None:
        self.claims = ClaimCombiner(
            self.pool, self.config.publish_lease_ms, self.config.claim_batch
        )
        self.positions = Positions(self.pool)


class ShardLeader(HorizonHolding):
    """Leads one shard from takeover until it is stopped, loses its session or is fenced out."""

    def __init__(self, shard: int, shared: Shared) -> None:
        self.shard = shard
        self.s = shared
        self.cfg = shared.config
        self.state = LeaderState.FOLLOWER
        self.lease: Lease | None = None
        self.wheel: TimingWheel[str, JobEntry | RetryEntry] = TimingWheel(
            WHEEL_TICK_MS, WHEEL_SIZE, 0
        )
        # The newest (version, next_run_at) applied per job key, from the horizon, the feed or
        # our own claims. Within one version next_run_at only moves forward (claims advance
        # it), so an older pair is a stale read racing a claim and is ignored. A job pending in
        # the wheel keeps its pair in its entry; `known` holds the jobs out of the wheel (due
        # and being claimed, claimed and done, beyond the horizon, paused): a loaded job costs
        # no tuple and no dict slot here (D-117).
        self.known: dict[str, tuple[int, int]] = {}
        # Due entries of tenants whose dispatch window is full (`window.py`): out of the wheel
        # (their pairs in `known`), claimed as the workers start the tenant's earlier runs.
        self._held: TenantQueue[JobEntry | RetryEntry] = TenantQueue()
        # Their wheel keys: a reload or a sweep offering a held entry again (it is still due in
        # the database) must not queue a second copy of it.
        self._held_keys: set[str] = set()
        self.horizon_end_ms = 0
        self.wake = asyncio.Event()
        self.dispatching = asyncio.Event()  # cleared while ZooKeeper is SUSPENDED
        self.dispatching.set()
        self._stopping = False
        self._retries_hinted = False  # a trigger or backfill was written: load retries now
        self.feed_since: str | None = None  # feed position read at takeover
        self._unacked: list[Dispatch] = []  # committed runs the broker refused: publish again
        self.sweeper = Sweeper(shard, shared.pool, shared.outbox, shared.config.retention_days)

    # --- control, from the election (same event loop) -------------------------------------

    def stop(self) -> None:
        """Leave after the batch in hand (rebalance, shutdown)."""
        self._stopping = True
        self.wake.set()
        self.dispatching.set()

    def suspend(self) -> None:
        if self.state is LeaderState.LEADING:
            self.state = LeaderState.SUSPENDED
        self.dispatching.clear()

    def hint_retries(self) -> None:
        """New runs on demand were committed in our shard (NOTIFY tickwheel_runs, via the
        feed): load the due retrying runs now rather than at the next sweep."""
        self._retries_hinted = True
        self.wake.set()

    def resume(self) -> None:
        if self.state is LeaderState.SUSPENDED:
            self.state = LeaderState.LEADING
        self.dispatching.set()
        self.wake.set()

    # --- the task -------------------------------------------------------------------------

    async def run(self) -> None:
        """TAKING_OVER → LEADING → … until stopped; FencedOut ends it as LOST."""
        self.state = LeaderState.TAKING_OVER
        try:
            async with self.s.pool.acquire() as conn:
                self.lease = await store.take_over(
                    conn, self.shard, self.s.owner, self._end_blockers
                )
                self.sweeper.adopting = self.lease.adopt
                await self.s.clock.sync(conn)
                self.wheel = TimingWheel(WHEEL_TICK_MS, WHEEL_SIZE, self.s.clock.now_ms())
                self.feed_since = await conn.fetchval(QUERIES["feed_position"])
                await self._load(conn)
            self.s.metrics.leadership.labels("acquired").inc()
            log.info(
                "leading shard",
                extra={"shard": self.shard, "epoch": self.lease.epoch, "wheel": len(self.wheel)},
            )
            if not self.dispatching.is_set():
                self.state = LeaderState.SUSPENDED
            else:
                self.state = LeaderState.LEADING
            if self.s.on_leading is not None:
                self.s.on_leading(self)
            await self._loop()
            await self._step_down()
            self.state = LeaderState.FOLLOWER
        except FencedOut as exc:
            self.state = LeaderState.LOST
            self.s.metrics.fenced_out.inc()
            self.s.metrics.leadership.labels("fenced_out").inc()
            log.warning("fenced out; stepping down", extra={"shard": self.shard, "why": str(exc)})
        except store.DB_ERRORS:
            # The takeover could not be completed (or a fence check failed to run): give the
            # shard back; the election offers it again, to us or to another process.
            self.state = LeaderState.LOST
            self.s.metrics.leadership.labels("failed").inc()
            log.warning(
                "database failed while leading; stepping down",
                extra={"shard": self.shard},
                exc_info=True,
            )
        finally:
            self.wheel = TimingWheel(WHEEL_TICK_MS, WHEEL_SIZE, 0)
            self._held = TenantQueue()  # still due in the database: the next leader claims them
            self._held_keys = set()
            self.horizon_end_ms = 0
            self.known.clear()
            self._unacked.clear()  # their rows stay pending: the next leader adopts them
            self.s.metrics.wheel_size.labels(str(self.shard)).set(0)
            self.s.metrics.window_held.labels(str(self.shard)).set(0)

    async def _loop(self) -> None:
        cfg = self.cfg
        next_sweep = time.monotonic()
        next_extend = time.monotonic() + cfg.extend_ms / 1000
        # The leaders of a process took over together: spread their full reloads.
        next_resync = time.monotonic() + cfg.resync_ms * random.uniform(0.5, 1.0) / 1000
        while not self._stopping:
            if not self.dispatching.is_set():
                await self.dispatching.wait()
                continue
            now = self.s.clock.now_ms()
            due = self._advance(now)
            if due or (self._held and self._held.ready(self.s.window.share)):
                await self._dispatch(due, now)
                continue  # a full batch may have more behind it: look again without sleeping
            if self._retries_hinted:
                self._retries_hinted = False
                await self._guarded(self._load_retries)
                continue
            mono = time.monotonic()
            if mono >= next_sweep:
                await self._guarded(self._sweep)
                next_sweep = mono + cfg.sweep_ms / 1000
                continue
            if mono >= next_resync:
                await self._guarded(self._resync)
                next_resync = mono + cfg.resync_ms / 1000
                next_extend = mono + cfg.extend_ms / 1000
                continue
            if mono >= next_extend:
                await self._guarded(self._extend)
                next_extend = mono + cfg.extend_ms / 1000
                continue
            self.s.metrics.wheel_size.labels(str(self.shard)).set(len(self.wheel))
            self.s.metrics.window_held.labels(str(self.shard)).set(len(self._held))
            delay_ms = cfg.tick_ms
            deadline = self.wheel.next_deadline_ms()
            if deadline is not None:
                delay_ms = min(delay_ms, max(0, deadline - self.s.clock.now_ms()))
            self.wake.clear()
            if delay_ms > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), delay_ms / 1000)

    async def _guarded(self, step: Any) -> None:
        """Run a periodic step; a database or broker failure is logged and retried later."""
        try:
            await step()
        except FencedOut:
            raise
        except STEP_ERRORS:
            log.warning("shard step failed; retrying", extra={"shard": self.shard}, exc_info=True)
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _end_blockers(self, waiting_pid: int) -> None:
        """The takeover still waits for the shard's row: end the replaced leader's sessions
        that hold it (frozen mid-statement, out of reach of the idle-in-transaction timeout)."""
        try:
            other = await dbmod.connect(self.s.dsn, timeout=UNBLOCK_CONNECT_TIMEOUT_S)
            try:
                ended = await store.end_blockers(other, waiting_pid)
            finally:
                await other.close(timeout=UNBLOCK_CONNECT_TIMEOUT_S)
        except store.DB_ERRORS:  # TimeoutError is an OSError
            log.warning(
                "could not end the sessions blocking a takeover; waiting for them",
                extra={"shard": self.shard},
                exc_info=True,
            )
            return
        if ended:
            log.warning(
                "ended a replaced leader's sessions that blocked the takeover",
                extra={
                    "shard": self.shard,
                    "sessions": [[r["pid"], r["application_name"], r["ended"]] for r in ended],
                },
            )

    # --- claim and publish ----------------------------------------------------------------

    async def _dispatch(
        self, due: list[tuple[str, int, JobEntry | RetryEntry | None]], now: int
    ) -> None:
        """Claim and publish what is due in batches of `claim_batch` drawn fairly between
        tenants (`fairness.py`), each tenant within its dispatch window (`window.py`); what
        comes due meanwhile joins the queue between batches, so one tenant's burst does not
        hold back another tenant's runs until it is all out. Entries of tenants without room
        stay held until a count of the workers' progress frees some."""
        queue = self._held
        self._hold(due)
        share = self.s.window.share
        claims = self.s.claims
        try:
            while queue:
                # The process's leaders take turns under a burst (claims.py); what came due
                # meanwhile joins the queue in `_turn_view`.
                size = await claims.turn(self.shard, self._turn_view)
                if not size:
                    break
                batch = queue.take(size, share)
                if not batch:
                    claims.release(self.shard)
                    self.s.window.wait_for_room(self.wake)
                    break
                now = self.s.clock.now_ms()
                held_keys = self._held_keys
                for v in batch:
                    held_keys.discard(v.key if isinstance(v, JobEntry) else retry_key(v))
                self.s.window.reserve(v.tenant for v in batch)  # settled by each claim
                jobs = [v for v in batch if isinstance(v, JobEntry)]
                retries = [v for v in batch if isinstance(v, RetryEntry)]
                if jobs:
                    await self._claim(jobs, now)
                claims.release(self.shard)  # the claim took its turn, or it failed before
                if retries:
                    await self._claim_retries(retries)
        finally:
            claims.release(self.shard)

    def _turn_view(self) -> tuple[Iterable[str], int]:
        """What this leader would claim now: its queue's tenants, and how many entries (what
        came due since it asked joins the queue first)."""
        if self._stopping or not self.dispatching.is_set():
            return (), 0
        self._hold(self._advance(self.s.clock.now_ms()))
        queue = self._held
        return queue.tenants(), min(len(queue), self.cfg.claim_batch)

    def _hold(self, due: list[tuple[str, int, JobEntry | RetryEntry | None]]) -> None:
        """Queue due entries for their claim, each key once."""
        held_keys = self._held_keys
        fresh = [(k, v) for k, _, v in due if v is not None and k not in held_keys]
        held_keys.update(k for k, _ in fresh)
        self._held.add(v for _, v in fresh)

    async def _claim(self, chunk: Sequence[JobEntry], now: int) -> None:
        assert self.lease is not None
        try:
            counts, runs_done = await store.plan_reads(self.s.pool, chunk)
            book = self.s.calendars
            if any(
                e.rules.calendars and not book.knows(e.tenant, e.rules.calendars) for e in chunk
            ):
                await book.poll(self.s.pool)  # a calendar created since its last poll (D-286)
            batch = plan_claims(chunk, now, self.s.cache, counts, runs_done, self.s.calendars)
            # One statement, fenced by itself, shared with the other leaders' claims made
            # meanwhile (claims.py, store.claim_many).
            claimed = await self.s.claims.claim(self.lease, batch)
            crash_point("scheduler_after_claim")
            stale: list[tuple[str, str]] = []
            done = claimed.jobs
            positions: list[Position] = []
            deleted: list[Position] = []  # windows ended with `after_end: delete`
            ids_of = zip(batch.tenants, batch.job_ids, strict=True)
            for entry, ids, next_ms in zip(batch.entries, ids_of, batch.next_ms, strict=True):
                if ids in done:
                    self._offer(
                        entry.key,
                        entry.version,
                        NO_NEXT_MS if next_ms is None else next_ms,
                        entry,
                    )
                    position = (ids[0], ids[1], entry.version, next_ms)
                    if deleted_at_end(entry, next_ms, batch.counted.get(ids)):
                        deleted.append(position)
                    else:
                        positions.append(position)
                else:
                    stale.append(ids)
            # The claim wrote no job's row: where each schedule stands goes in a later batch.
            self.s.positions.claimed(positions, self.horizon_end_ms)
            if deleted:
                self.s.positions.ended(deleted)
            self.s.positions.counted(batch.counted, done)
            if stale:
                # Edited, paused, deleted since the wheel learnt of them: read the truth now
                # rather than wait for the feed (it may be on its way too; versions decide).
                async with self.s.pool.acquire() as conn:
                    for row in await store.jobs_by_keys(conn, stale):
                        self.apply_job_row(row)
        except FencedOut:
            raise
        except store.DB_ERRORS:
            log.warning(
                "claim failed; its entries go back into the wheel",
                extra={"shard": self.shard, "entries": len(chunk)},
                exc_info=True,
            )
            for entry in chunk:
                self.wheel.schedule(entry.key, entry.next_ms, entry)
            self.s.window.settle((e.tenant for e in chunk), ())
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        # The batch's tenants, one per entry of the chunk, as the plan cut them from the keys.
        self.s.window.settle(batch.tenants, (r.tenant for r in claimed.runs))
        m = self.s.metrics
        m.claimed.inc(len(claimed.runs))
        m.skipped.inc(batch.skipped)
        if any(
            status == RunStatus.PENDING and not leased
            for status, leased in zip(batch.run_status, batch.run_leased, strict=True)
        ):
            self.sweeper.maybe_buffered = True
        runs = claimed.runs
        if batch.due:  # jittered runs: the envelope says when each was due (D-287)
            due = batch.due
            runs = [
                r if (at := due.get((r.tenant, r.job_id, r.scheduled_ms))) is None
                else r._replace(due_ms=at)
                for r in runs
            ]  # fmt: skip
        await self._publish(runs, "first")

    async def _claim_retries(self, chunk: Sequence[RetryEntry]) -> None:
        assert self.lease is not None
        held = 0
        try:
            async with self.s.pool.acquire() as conn, store.fenced(conn, self.lease):
                due = list(chunk)
                first = [r for r in chunk if r.attempt == 0]
                if first:
                    # Triggers and backfills: their first dispatch meets the job's overlap
                    # policy as a scheduled occurrence does (plan.plan_first_dispatch).
                    keys = list({(r.tenant, r.job_id) for r in first})
                    policies = await store.overlap_policies(conn, keys)
                    if policies:
                        counts = await store.in_flight(conn, list(policies))
                        plan = plan_first_dispatch(first, policies, counts)
                        if plan.hold:
                            held = await store.hold_first_dispatches(conn, self.lease, plan.hold)
                        if plan.skip:
                            skipped = await store.skip_first_dispatches(
                                conn, self.lease, REASON_OVERLAP, plan.skip
                            )
                            self.s.metrics.skipped.inc(skipped)
                        decided = {id(r) for r in (*plan.hold, *plan.skip)}
                        due = [r for r in chunk if id(r) not in decided]
                runs = await store.claim_retries(conn, self.lease, self.cfg.publish_lease_ms, due)
        except FencedOut:
            raise
        except store.DB_ERRORS:
            log.warning("retry claim failed", extra={"shard": self.shard}, exc_info=True)
            for retry in chunk:
                self.wheel.schedule(retry_key(retry), retry.retry_ms, retry)
            self.s.window.settle((r.tenant for r in chunk), ())
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        if held:
            self.sweeper.maybe_buffered = True
        self.s.window.settle((r.tenant for r in chunk), (r.tenant for r in runs))
        await self._publish(runs, "retry")

    async def _publish(self, runs: Sequence[Dispatch], kind: str) -> None:
        """Publish committed runs; keep the ones the broker refused for the next sweep."""
        if not runs:
            return
        assert self.lease is not None
        acked = await self.s.outbox.publish(
            runs, self.lease.epoch, self.shard, again=kind in SENT_AGAIN
        )
        crash_point("scheduler_after_publish")
        if len(acked) < len(runs):
            done = {id(r) for r in acked}
            self._unacked.extend(r for r in runs if id(r) not in done)
        if not acked:
            return
        acked_at = self.s.clock.now_ms()
        m = self.s.metrics
        m.published.labels(kind).inc(len(acked))
        if kind == "first":
            # From the instant each run was due: a jittered run's is after its scheduled one.
            observe_many(
                m.dispatch_lag,
                [
                    max(0, acked_at - (r.scheduled_ms if r.due_ms is None else r.due_ms)) / 1000
                    for r in acked
                ],
            )

    # --- the sweeper ----------------------------------------------------------------------

    async def _sweep(self) -> None:
        """The sweeper's turn (`sweeper.py`): what it found is published, with what the broker
        refused since the last sweep."""
        assert self.lease is not None
        swept = await self.sweeper.sweep(
            self.lease, self.cfg.publish_lease_ms, self._schedule_retries
        )
        unacked, self._unacked = self._unacked, []  # a refusal again puts them back
        if (
            unacked
            or swept.adopted
            or swept.republish
            or swept.requeue
            or swept.dead
            or (swept.buffered)
        ):
            log.info(
                "sweep",
                extra={
                    "shard": self.shard,
                    "unacked": len(unacked),
                    "adopted": len(swept.adopted),
                    "republished": len(swept.republish),
                    "requeued": len(swept.requeue),
                    "dead": swept.dead,
                    "released": len(swept.buffered),
                },
            )
        self.s.metrics.dead.inc(swept.dead)
        await self._publish(unacked, "unacked")
        await self._publish(swept.adopted, "adopted")
        await self._publish(swept.republish, "republish")
        await self._publish(swept.requeue, "requeue")
        await self._publish(swept.buffered, "buffered")

    async def _schedule_retries(self, conn: store.Conn) -> None:
        """Sweeper (c): the shard's retrying runs due within the horizon go into the wheel."""
        until = self.s.clock.now_ms() + self.cfg.horizon_ms
        self._wheel_retries(await store.retries(conn, self.shard, until))

    async def _load_retries(self) -> None:
        async with self.s.pool.acquire() as conn:
            await self._schedule_retries(conn)

    async def _step_down(self) -> None:
        if self.lease is None:
            return
        if self._unacked:
            # Runs the broker refused are still to publish: leave the owner set, so that the
            # next leader adopts them at its takeover.
            log.warning(
                "stepping down with unacknowledged runs; the next leader adopts them",
                extra={"shard": self.shard, "runs": len(self._unacked)},
            )
            self.s.metrics.leadership.labels("released").inc()
            return
        try:
            async with self.s.pool.acquire() as conn:
                await store.step_down(conn, self.lease)
        except store.DB_ERRORS:
            log.warning("could not clear the shard owner", extra={"shard": self.shard})
        self.s.metrics.leadership.labels("released").inc()
