"""The `tickwheel scheduler` process: election, shard leaders, change feed, metrics.

Parts (run under `tickwheel.runtime.Process`, so a part that dies stops the process, exit 1):

    election   keeps the process registered in ZooKeeper and makes the set of shards it leads
               match the assignment: starts a `ShardLeader` task for each shard node it
               creates, stops and releases the others. A leader task that fails unexpectedly
               is re-raised here (the process stops); one that was fenced out or stopped just
               gives its node back.
    feed       the change-feed poller of all led shards (`feed.py`).

SUSPENDED suspends every leader (no dispatching, wheels kept); CONNECTED resumes them; LOST
stops them (wheels dropped) and, once connected again with a new session, the process
registers anew and takes whatever the assignment then gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

import asyncpg
from kazoo.client import KazooState
from kazoo.exceptions import KazooException

from tickwheel import db
from tickwheel.config import Settings
from tickwheel.deployment import zk_root
from tickwheel.kafka.clients import producer
from tickwheel.kafka.producing import ONLY_ERROR_REPORTS
from tickwheel.runtime import Process, tune_gc
from tickwheel.schedule import ScheduleCache
from tickwheel.shards import store
from tickwheel.shards.assignment import assign
from tickwheel.shards.dbclock import DbClock
from tickwheel.shards.election import Election
from tickwheel.shards.feed import ChangeFeed
from tickwheel.shards.leader import LeaderConfig, ShardLeader, Shared
from tickwheel.shards.metrics import SchedulerMetrics
from tickwheel.shards.outbox import PUBLISHERS, Outbox
from tickwheel.shards.window import DispatchWindow
from tickwheel.topics import Topics

log = logging.getLogger("tickwheel.scheduler")

RECONCILE_INTERVAL_S = 1.0  # seconds between re-checks of the assignment without a watch event
LEADER_STOP_TIMEOUT_S = 10.0  # seconds a stopped leader gets to finish its batch


def default_member_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def leader_config(settings: Settings) -> LeaderConfig:
    return LeaderConfig(
        tick_ms=settings.tick_ms,
        horizon_ms=settings.horizon_s * 1000,
        publish_lease_ms=settings.publish_lease_s * 1000,
        claim_batch=settings.claim_batch,
        sweep_ms=settings.sweep_interval_ms,
        resync_ms=settings.resync_s * 1000,
        extend_ms=settings.horizon_extend_s * 1000,
        retention_days=settings.retention_days,
    )


class Scheduler:
    """One scheduler process's parts; `start` spawns them on a `Process`."""

    def __init__(
        self,
        settings: Settings,
        member_id: str | None = None,
        metrics_address: str | None = None,
    ) -> None:
        self.settings = settings
        self.member_id = member_id or default_member_id()
        self.metrics_address = metrics_address  # advertised in ZooKeeper for `tickwheel status`
        self.metrics = SchedulerMetrics()
        self.metrics.shards.set(settings.shards)
        self.leaders: dict[int, ShardLeader] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.election: Election | None = None
        self.feed: ChangeFeed | None = None
        self.shared: Shared | None = None
        self._pool: asyncpg.Pool | None = None
        self._window_pool: asyncpg.Pool | None = None
        self._outbox: Outbox | None = None

    async def start(self, process: Process) -> None:
        s = self.settings
        tune_gc()
        self._pool = await db.create_pool(
            s.effective_dsn,
            min_size=2,
            max_size=s.scheduler_db_connections,
            # A leader frozen inside a transaction (SIGSTOP, a long GC pause) holds its shard
            # row share-locked, and the next leader's takeover waits for that lock. Postgres
            # ends such a session after this long, so a takeover waits at most about one
            # session timeout, and the frozen leader's transaction is rolled back.
            # A freeze between a statement's Parse and Sync escapes that timeout (the session
            # counts as active); the successor's takeover ends such sessions, which it finds
            # by this application_name (store.take_over).
            server_settings={
                "idle_in_transaction_session_timeout": str(s.zk_session_timeout_ms),
                "application_name": store.scheduler_app_name(self.member_id),
            },
            # The leaders' statements change no session state (transactions only).
            reset_sessions=False,
        )
        # Nothing is led, claimed or published for a database of another deployment (D-048).
        try:
            await db.check_deployment(self._pool, s.topic_prefix, "scheduler")
        except BaseException:
            await self._pool.close()
            self._pool = None
            raise
        clock = DbClock()  # synced below, before any leader publishes
        client = f"scheduler-{uuid.uuid4().hex[:8]}"
        self._outbox = Outbox(
            [
                producer(s.effective_kafka, **{"client.id": f"{client}-{i}"}, **ONLY_ERROR_REPORTS)
                for i in range(PUBLISHERS)
            ],
            Topics(s.topic_prefix),
            clock.now_ms,
            run_seal=await db.run_seal(self._pool),
        )
        await self._outbox.warm_up()
        self.feed = ChangeFeed(
            s.effective_dsn, s.tick_ms, self.leaders, on_lag=self.metrics.feed_lag.set
        )
        feed = self.feed
        self.shared = Shared(
            owner=self.member_id,
            config=leader_config(s),
            pool=self._pool,
            outbox=self._outbox,
            cache=ScheduleCache(),
            clock=clock,
            metrics=self.metrics,
            on_leading=lambda leader: feed.attach(leader.feed_since or "0"),
            dsn=s.effective_dsn,
            window=DispatchWindow(
                s.tenant_dispatch_window, s.dispatch_window_refresh_ms / 1000, s.shards
            ),
        )
        async with self._pool.acquire() as conn:
            await self.shared.clock.sync(conn)
        # Every calendar before any shard is led: a claim never decides without them.
        await self.shared.calendars.poll(self._pool)
        self.election = Election(
            s.effective_zk,
            zk_root(s.topic_prefix),
            self.member_id,
            s.zk_session_timeout_ms / 1000,
            self._on_zk_state,
            self.metrics_address,
        )
        await self.election.start()
        self.metrics.zk_state.set(1)
        process.on_close(self.close)
        process.spawn("election", self._coordinate(process))
        process.spawn("feed", self.feed.run(process.stop))
        process.spawn("positions", self.shared.positions.run(process.stop))
        process.spawn(
            "calendars",
            self.shared.calendars.run(
                self._pool, process.stop, on_age=self.metrics.calendars_age.set
            ),
        )
        # The window's counts have a connection of their own: from the leaders' pool a count
        # waited for one about a second in a steady 5,000/s run, and a window that sees the
        # workers' progress a second late holds back what they could already run.
        self._window_pool = await db.create_pool(
            s.effective_dsn,
            min_size=1,
            max_size=1,
            server_settings={
                **db.KEYED_LOOKUPS,
                "application_name": store.scheduler_app_name(self.member_id),
            },
            reset_sessions=False,
        )
        process.spawn("window", self.shared.window.run(self._window_pool, process.stop))
        log.info(
            "scheduler started",
            extra={"member": self.member_id, "shards": s.shards, "prefix": s.topic_prefix},
        )

    # --- ZooKeeper state, on the loop -------------------------------------------------------

    def _on_zk_state(self, state: str) -> None:
        self.metrics.zk_state.set(1 if state == KazooState.CONNECTED else 0)
        if state == KazooState.SUSPENDED:
            for leader in self.leaders.values():
                leader.suspend()
        elif state == KazooState.LOST:
            for leader in self.leaders.values():
                leader.stop()
            self.metrics.leadership.labels("lost").inc(len(self.leaders))
        elif state == KazooState.CONNECTED:
            for leader in self.leaders.values():
                leader.resume()

    # --- the election part ------------------------------------------------------------------

    async def _coordinate(self, process: Process) -> None:
        election = self.election
        assert election is not None
        health = process.state("election")
        try:
            while not process.stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(election.changed.wait(), RECONCILE_INTERVAL_S)
                election.changed.clear()
                await self._reap()
                if not election.connected:
                    continue
                try:
                    if not election.registered:
                        await election.register()
                    await self._reconcile()
                except KazooException:
                    log.warning("zookeeper call failed; retrying", exc_info=True)
                health.report(
                    shards=sorted(self.leaders),
                    connected=election.connected,
                    members=len(election.members),
                )
                self.metrics.shards_led.set(len(self.leaders))
        finally:
            await self._stop_all()

    async def _reconcile(self) -> None:
        election = self.election
        assert election is not None
        members = election.members
        if self.member_id not in members:
            return  # our own registration is not visible yet
        desired = assign(self.settings.shards, members).get(self.member_id, frozenset())
        for shard in [s for s in self.leaders if s not in desired]:
            await self._stop_leader(shard)
        for shard in sorted(desired - set(self.leaders)):
            if shard in election.taken:
                continue  # its previous holder has not let go yet; its deletion wakes us
            if await election.acquire(shard):
                self._start_leader(shard)

    def _start_leader(self, shard: int) -> None:
        assert self.shared is not None
        leader = ShardLeader(shard, self.shared)
        if self.election is not None and not self.election.connected:
            leader.suspend()
        self.leaders[shard] = leader
        self.tasks[shard] = asyncio.get_running_loop().create_task(
            leader.run(), name=f"shard-{shard}"
        )
        self.tasks[shard].add_done_callback(lambda _t: self._wake())

    def _wake(self) -> None:
        if self.election is not None:
            self.election.changed.set()

    async def _reap(self) -> None:
        """Leaders whose task ended: re-raise a failure, give back the node of the others."""
        for shard, task in list(self.tasks.items()):
            if not task.done():
                continue
            del self.tasks[shard]
            del self.leaders[shard]
            exc = task.exception()
            if exc is not None:
                raise exc
            await self._release(shard)

    async def _stop_leader(self, shard: int) -> None:
        leader, task = self.leaders[shard], self.tasks[shard]
        leader.stop()
        done, _ = await asyncio.wait({task}, timeout=LEADER_STOP_TIMEOUT_S)
        if not done:
            task.cancel()
            await asyncio.wait({task})
        self.tasks.pop(shard, None)
        self.leaders.pop(shard, None)
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        await self._release(shard)

    async def _release(self, shard: int) -> None:
        if self.election is None:
            return
        try:
            await self.election.release(shard)
        except KazooException:
            log.warning("could not release shard node %d", shard, exc_info=True)

    async def _stop_all(self) -> None:
        for shard in list(self.leaders):
            try:
                await self._stop_leader(shard)
            except Exception:
                log.exception("stopping shard %d failed", shard)

    async def close(self) -> None:
        if self.election is not None:
            await self.election.close()
        if self._outbox is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._outbox.close)
        if self._pool is not None:
            await self._pool.close()
        if self._window_pool is not None:
            await self._window_pool.close()


class _MemberField(logging.Filter):
    """Stamps every log record of the process with its member id (`--id`)."""

    def __init__(self, member_id: str) -> None:
        super().__init__()
        self.member_id = member_id

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "member"):
            record.member = self.member_id
        return True


async def serve(settings: Settings, member_id: str | None, metrics_port: int | None) -> int:
    """Run a scheduler process until SIGINT/SIGTERM or a part's death; return the exit code."""
    process = Process("scheduler")
    scheduler = Scheduler(settings, member_id)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_MemberField(scheduler.member_id))
    if metrics_port is not None:
        from prometheus_client import start_http_server

        server, _ = start_http_server(
            metrics_port, addr="0.0.0.0", registry=scheduler.metrics.registry
        )
        # Port 0 picks a free port: the one bound is what we advertise. The host name is how
        # other hosts reach us (the server listens on every interface).
        scheduler.metrics_address = f"{socket.gethostname()}:{server.server_port}"
    await scheduler.start(process)
    return await process.run()
