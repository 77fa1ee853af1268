"""The change feed, polled once per tick for all the shards a process leads (docs/CHANGE_FEED.md).

One poller per process rather than one per shard: a process leading 64 shards would otherwise
send 640 queries a second while nothing changes. The poller keeps one position, the lowest of
the positions its shards' takeovers read (a position taken earlier only re-reads changes, which
the leaders deduplicate by (version, next_run_at)); it wakes early on a NOTIFY for one of its
shards, and otherwise polls every tick, because a hint can be lost. It also passes on the
registry's `tickwheel_runs` NOTIFY (a trigger or backfill was written) to the shard's leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from tickwheel.queries import QUERIES
from tickwheel.shards.leader import LeaderState, ShardLeader
from tickwheel.shards.store import DB_ERRORS

log = logging.getLogger("tickwheel.scheduler.feed")

NOTIFY_CHANNEL = "tickwheel_jobs"
# Runs on demand (registry_api/on_demand.py) were written in a shard: its leader loads its due
# retrying runs at once. A hint too: a lost one only delays them to the next sweep.
RUNS_NOTIFY_CHANNEL = "tickwheel_runs"
RECONNECT_BACKOFF_S = 1.0  # seconds before a lost feed connection is opened again


class ChangeFeed:
    """Routes changed job rows to the wheels of the shards this process leads."""

    def __init__(
        self,
        dsn: str,
        tick_ms: int,
        leaders: dict[int, ShardLeader],
        on_lag: Callable[[float], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.tick_s = tick_ms / 1000
        self.leaders = leaders
        self.on_lag = on_lag
        self.since: int | None = None
        self._attached: int | None = None  # positions attached while a poll was running
        self.hint = asyncio.Event()
        self.polls = 0

    def attach(self, position: str) -> None:
        """A shard was taken with the feed at `position`: poll from there at the latest."""
        value = int(position)
        self.since = value if self.since is None else min(self.since, value)
        self._attached = value if self._attached is None else min(self._attached, value)
        self.hint.set()

    def _notified(self, *args: Any) -> None:
        payload = args[3]
        try:
            shard = int(payload)
        except ValueError:
            return
        if shard in self.leaders:
            self.hint.set()

    def _runs_notified(self, *args: Any) -> None:
        try:
            shard = int(args[3])
        except ValueError:
            return
        leader = self.leaders.get(shard)
        if leader is not None and leader.state == LeaderState.LEADING:
            leader.hint_retries()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                conn = await asyncpg.connect(self.dsn)
            except DB_ERRORS:
                log.warning("feed cannot connect; retrying", exc_info=True)
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            try:
                await conn.add_listener(NOTIFY_CHANNEL, self._notified)
                await conn.add_listener(RUNS_NOTIFY_CHANNEL, self._runs_notified)
                await self._poll_loop(conn, stop)
            except DB_ERRORS:
                log.warning("feed connection failed; reconnecting", exc_info=True)
                await asyncio.sleep(RECONNECT_BACKOFF_S)
            finally:
                await conn.close(timeout=2)

    async def _poll_loop(self, conn: asyncpg.Connection, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.hint.wait(), self.tick_s)
            self.hint.clear()
            await self.poll(conn)

    async def poll(self, conn: asyncpg.Connection) -> int:
        """One poll: route every changed row of a led shard; returns the rows seen."""
        shards = [
            s for s, leader in self.leaders.items() if leader.state != LeaderState.TAKING_OVER
        ]
        if not shards or self.since is None:
            return 0
        self._attached = None
        position = await conn.fetchval(QUERIES["feed_position"])
        rows = await conn.fetch(QUERIES["jobs_changed_since"], shards, str(self.since))
        self.polls += 1
        newest = None
        for row in rows:
            leader = self.leaders.get(row["shard_id"])
            if leader is not None and leader.state in (LeaderState.LEADING, LeaderState.SUSPENDED):
                leader.apply_job_row(row)
                newest = row["updated_at"] if newest is None else max(newest, row["updated_at"])
        if newest is not None and self.on_lag is not None and rows:
            now_ms: int = await conn.fetchval(QUERIES["db_clock_ms"])
            self.on_lag(max(0, now_ms - newest) / 1000)
        self.since = int(position) if self._attached is None else min(int(position), self._attached)
        return len(rows)
