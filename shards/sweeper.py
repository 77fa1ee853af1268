"""A shard leader's sweeper: what it publishes again, dead-letters, re-queues and releases.

Every `sweep_interval_ms` (`ShardLeader._loop`), fenced like the claim, for one shard:

    (a) the earlier epochs' pending runs, until none is left, when the previous leader did not
        step down cleanly (adoption, from the takeover on; a clean step-down clears the owner
        only with every publish acknowledged), and, as a safety net, pending runs of this epoch
        neither finished nor marked running when their publish lease (default 5 minutes)
        lapsed: both are sent again with the header `again` (D-268); the runs the broker
        refused earlier are the leader's, kept in memory, and go out with them;
    (b) running runs whose worker lease lapsed: the next attempt, or `dead` plus a dead letter
        on the last one (the DLQ publish is acknowledged before that transaction commits, so a
        crash repeats it rather than losing it);
    (c) `retrying` runs due within the horizon go into the leader's wheel (the caller's
        `schedule_retries`), claimed when due with `retries_claim` (I6);
    (d) runs buffered by overlap `buffer_one` whose job has no other run in flight are released
        (`plan.py`);

and shard 0's leader ensures the day partitions of `job_runs` and applies the retention
(`tickwheel.maintenance.Upkeep`). Nothing here holds the wheel: the runs to publish are handed
back (`Swept`), and the leader publishes them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import asyncpg

from tickwheel.domain import run_key
from tickwheel.maintenance import Upkeep
from tickwheel.shards import store
from tickwheel.shards.outbox import Outbox
from tickwheel.shards.store import Dispatch, Lease

log = logging.getLogger("tickwheel.scheduler.leader")


@dataclass
class Swept:
    """What a sweep found to publish, by why (the kinds the leader's metrics count)."""

    adopted: list[Dispatch] = field(default_factory=list)
    republish: list[Dispatch] = field(default_factory=list)
    requeue: list[Dispatch] = field(default_factory=list)
    buffered: list[Dispatch] = field(default_factory=list)
    dead: int = 0


class Sweeper:
    """The sweeps of one shard's leader, and what they remember between two sweeps."""

    def __init__(self, shard: int, pool: asyncpg.Pool, outbox: Outbox, retention_days: int):
        self.shard = shard
        self.pool = pool
        self.outbox = outbox
        self.retention_days = retention_days
        self.adopting = False  # pending rows of an unclean predecessor remain (takeover)
        self.maybe_buffered = True  # a claim may have buffered runs: look at the next sweep
        self._upkeep = Upkeep()  # partitions and retention, run by shard 0's leader

    async def sweep(
        self,
        lease: Lease,
        lease_ms: int,
        schedule_retries: Callable[[store.Conn], Awaitable[None]],
    ) -> Swept:
        """One sweep under `lease`: (c) through `schedule_retries` on the sweep's connection,
        then (a), (b) and (d); what to publish, returned."""
        swept = Swept()
        async with self.pool.acquire() as conn:
            await schedule_retries(conn)
            # A lease that lapses just after this check is found by the next sweep.
            if self.adopting or await store.has_lapsed(conn, self.shard):
                async with store.fenced(conn, lease):
                    if self.adopting:
                        swept.adopted = await store.adopt(conn, lease, lease_ms)
                        # Runs a worker held were skipped: adopt again at the next sweep
                        # while one is still pending (its claim may have failed).
                        full = len(swept.adopted) >= store.SWEEP_LIMIT
                        self.adopting = full or await store.has_unadopted(conn, lease)
                    swept.republish = await store.sweep_republish(conn, lease, lease_ms)
                    swept.requeue = await store.sweep_requeue_running(conn, lease, lease_ms)
                async with store.fenced(conn, lease):
                    dead = await store.sweep_dead_running(conn, lease)
                    # Acked before commit: a crash here repeats the dead letter, never loses it.
                    await self.outbox.publish_dead(dead)
                swept.dead = len(dead)
                for d in dead:  # rare (a worker lost on a last attempt): one line per run
                    log.warning(
                        "run dead: its worker's lease lapsed on the last attempt",
                        extra={
                            "shard": self.shard,
                            "run_key": run_key(d.run.tenant, d.run.job_id, d.run.scheduled_ms),
                            "error": d.error,
                        },
                    )
            if self.maybe_buffered:
                async with store.fenced(conn, lease):
                    swept.buffered = await store.release_buffered(conn, lease, lease_ms)
                self.maybe_buffered = await store.has_buffered(conn, self.shard)
            if self.shard == 0:
                created, report = await self._upkeep.run_due(
                    cast(asyncpg.Connection, conn), self.retention_days
                )
                if created is not None:
                    log.info("job_runs partitions ensured", extra={"partitions_created": created})
                if report is not None:
                    log.info("retention applied", extra={"gc": report.to_json()})
        return swept
