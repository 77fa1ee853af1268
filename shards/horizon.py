"""What a shard's leader holds of its horizon: the wheel, the jobs out of it, and their loading.

`HorizonHolding` is the part of `ShardLeader` (leader.py) that keeps the wheel current:

    load      at takeover, the jobs and retrying runs due before now + horizon (a job already
              due whose position was not written goes on from its latest run, D-269)
    extend    every `extend_ms`, the slice of time the horizon newly covers
    resync    every `resync_ms`, the safety net: each job's (version, next_run_at) against
              what the wheel holds, the differing jobs read in full
    offer     one job's row (from the above, the change feed, a claim): scheduled in the wheel
              or kept in `known`; between two rows of one job, versions decide, and within one
              version the next occurrence only moves forward
    advance   the wheel's due entries, their pairs kept in `known` until their claim offers
              the next one

A mixin and not a class of its own: the wheel, `known` and the horizon's end are the leader's
state, read by its claim loop and its tests by those names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import asyncpg

from tickwheel.domain import JobStatus, job_key, run_key
from tickwheel.shards import store
from tickwheel.shards.plan import (
    NO_NEXT_MS,
    JobEntry,
    RetryEntry,
    deleted_at_end,
    due_at,
    next_fire,
)
from tickwheel.shards.positions import Position
from tickwheel.wheel import TimingWheel

if TYPE_CHECKING:
    from tickwheel.shards.leader import LeaderConfig, Shared

_NOTHING_KNOWN = (0, -1)  # below every (version, next_run_at) a job can have


def retry_key(retry: RetryEntry) -> str:
    """A retrying run's wheel key: its run key (a job's is its job key)."""
    return run_key(retry.tenant, retry.job_id, retry.scheduled_ms)


class HorizonHolding:
    """The wheel side of a shard's leader (module docstring)."""

    shard: int
    s: Shared
    cfg: LeaderConfig
    wheel: TimingWheel[str, JobEntry | RetryEntry]
    known: dict[str, tuple[int, int]]
    horizon_end_ms: int
    wake: asyncio.Event

    # --- the wheel ------------------------------------------------------------------------

    async def _load(self, conn: store.Conn) -> None:
        """Load the horizon at takeover: active jobs and retrying runs due before now +
        horizon."""
        until = await self._move_end(conn)
        jobs, retries = await store.horizon(conn, self.shard, until)
        derived: list[Position] = []
        deleted: list[Position] = []  # windows ended with `after_end: delete`
        for entry, claimed_through in jobs:
            next_ms = entry.next_ms
            if claimed_through is not None:
                # A predecessor claimed up to there and its position was not written yet
                # (D-269): go on from the occurrence after it, and write where it stands.
                following = next_fire(self.s.cache, entry, claimed_through)
                next_ms = NO_NEXT_MS if following is None else following
                position = (entry.tenant, entry.job_id, entry.version, following)
                if deleted_at_end(entry, following, None):
                    deleted.append(position)
                else:
                    derived.append(position)
            self._offer(entry.key, entry.version, next_ms, entry)
        if derived:
            self.s.positions.claimed(derived, self.horizon_end_ms)
        if deleted:
            self.s.positions.ended(deleted)
        self._wheel_retries(retries)

    async def _move_end(self, conn: store.Conn) -> int:
        """Move the horizon's end to now + horizon (never back) before a whole-horizon read: a
        row the change feed applies while the read is in flight (newer than the read's
        snapshot) then lands in the wheel, not in `known` for good; between the two rows of one
        job, versions decide (`_offer`)."""
        await self.s.clock.sync(conn)
        self.horizon_end_ms = max(self.horizon_end_ms, self.s.clock.now_ms() + self.cfg.horizon_ms)
        return self.horizon_end_ms

    def _wheel_retries(self, retries: Sequence[RetryEntry]) -> None:
        for retry in retries:
            self.wheel.schedule(retry_key(retry), retry.retry_ms, retry)

    async def _resync(self) -> None:
        """The safety net (every `resync_ms`): the whole horizon checked against the database.
        Only each job's (version, next_run_at) is read; the jobs whose pair the wheel does not
        hold are then read in full and offered as the change feed's rows are — what a reload
        of every row would have changed, without decoding the jobs it would not."""
        async with self.s.pool.acquire() as conn:
            until = await self._move_end(conn)
            pairs, retries = await store.horizon_versions(conn, self.shard, until)
            missing = self._not_held(pairs)
            rows = await store.jobs_by_keys(conn, missing) if missing else []
        for row in rows:
            self.apply_job_row(row)
        self._wheel_retries(retries)

    def _not_held(self, pairs: Sequence[asyncpg.Record]) -> list[tuple[str, str]]:
        """The jobs (tenant, job_id) of `pairs` — rows (tenant, job_id, version, next_run_at)
        — that `_offer` would act on: those not in the wheel at their pair or a newer one, nor
        known at a newer one. A pair only equal to the one `known` keeps is offered again, as
        a reload would: it is the occurrence a claim has not moved on yet (a claim that did not
        happen, or whose job's row a registry held) or one that was beyond the horizon."""
        return [
            (tenant, job_id)
            for tenant, job_id, version, next_ms in pairs
            if self._would_act(job_key(tenant, job_id), (version, next_ms))
        ]

    def _would_act(self, key: str, state: tuple[int, int]) -> bool:
        """Whether `_offer` acts on a job's (version, next_run_at): not when this leader holds
        a newer pair, nor when its wheel holds an entry at this very pair (the change feed
        repeats rows across polls; the entry it has is that row's)."""
        held, in_wheel = self._pair_held(key)
        return state > held if in_wheel else state >= held

    def _pair_held(self, key: str) -> tuple[tuple[int, int], bool]:
        """The (version, next_run_at) this leader holds for a job, and whether it is a wheel
        entry's: the entry's pair, else the pair `known` keeps, else one below every job's."""
        pending = self.wheel.get(key)
        if type(pending) is JobEntry:
            return (pending.version, pending.next_ms), True
        return self.known.get(key, _NOTHING_KNOWN), False

    async def _extend(self) -> None:
        """Move the horizon's end to now + horizon, loading only the jobs due in the slice of
        time it newly covers. Every job due before the old end is in the wheel already (loaded,
        offered by its claim, or by the change feed), so the steady cost is each job read once
        as it comes within the horizon, not the whole horizon per reload."""
        start = self.horizon_end_ms
        until = self.s.clock.now_ms() + self.cfg.horizon_ms
        if until <= start:
            return
        self.horizon_end_ms = until  # before the read, as in `_load`
        # Positions claimed beyond the old end must be in the rows the slice reads (D-269).
        await self.s.positions.flush_before(until)
        async with self.s.pool.acquire() as conn:
            entries = await store.horizon_slice(conn, self.shard, start, until)
        for entry in entries:
            self._offer(entry.key, entry.version, entry.next_ms, entry)
        if entries:
            self.wake.set()

    def apply_job_row(self, row: asyncpg.Record) -> None:
        """A job row from the change feed or a refresh: schedule or cancel its wheel entry."""
        next_ms = row["next_run_at"]
        if row["status"] == JobStatus.ACTIVE and next_ms is not None:
            # The wheel keeps the entry's own key: a second string per loaded job was ~80 of
            # its bytes (docs/journal/hot-second.md, *Memory of a loaded job*).
            entry = store.entry_of(row)
            self._offer(entry.key, entry.version, next_ms, entry)
        else:
            self._offer(job_key(row["tenant"], row["job_id"]), row["version"], NO_NEXT_MS, None)
        self.wake.set()

    def _offer(self, key: str, version: int, next_ms: int, entry: JobEntry | None) -> None:
        state = (version, next_ms)
        if not self._would_act(key, state):
            return
        if entry is not None and next_ms < self.horizon_end_ms:
            entry.next_ms = next_ms
            # A jittered occurrence is claimed when it is due, after its instant (D-287); the
            # entry keeps the scheduled one, which its row and the claim's fence name.
            due = next_ms if not entry.rules.jitter_ms else due_at(self.s.cache, entry, next_ms)
            self.wheel.schedule(key, due, entry)
            self.known.pop(key, None)
        else:
            self.wheel.cancel(key)
            self.known[key] = state

    def _advance(self, now: int) -> list[tuple[str, int, JobEntry | RetryEntry | None]]:
        """The wheel's due entries; the jobs among them leave the wheel, so `known` keeps their
        pair until their claim offers the next one."""
        due = self.wheel.advance(now)
        known = self.known
        for key, _, value in due:
            if type(value) is JobEntry:
                known[key] = (value.version, value.next_ms)
        return due
