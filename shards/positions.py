"""Where claimed jobs' schedules stand, written to `jobs` in batches off the claim (I3, D-269).

A claim reads each due job's row and does not write it; the leader knows the job's next
occurrence (or that it has none: a one-off, or a schedule that ended) and keeps it in its wheel.
The row's `next_run_at` and `status` still matter to the readers of `jobs` — the horizon's slices
(`horizon_jobs`), the registry, the API — so each claimed job's position is queued here and
written later by one statement for many jobs (`jobs_positions`: forward only, over the version
the claim saw):

    soon   a position the leader's wheel does not hold — an occurrence beyond the horizon,
           which the horizon's slice read must find in the row — is written before the
           leader's next extension (`flush_before`), and by the loop within `SOON_S`
    later  the rest (the next occurrence within the horizon, a completed one-off) while no
           claim is under way for `IDLE_S`, or every `LATER_S` at the latest, or once
           `MAX_QUEUED` wait: a hot second's completions are written after its burst, not
           inside it

    ended  a job whose window ended with `after_end: delete`: deleted (and its tenant's job
           count moved) within `SOON_S`, by a statement of its own (`jobs_end_delete`), so the
           common statement stays as it is

    counted  a job with max_runs: its counted runs and the instant they run through, within
           `SOON_S`, forward only (`jobs_run_counts_write`); a count lost costs nothing, the
           next claim derives it from the runs (`jobs_run_counts_read`)

A position lost with its process (a crash before the write) costs nothing but a re-read: the
next leader derives it from the runs when it loads the horizon (`horizon_jobs`
`claimed_through`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import asyncpg

from tickwheel import db
from tickwheel.queries import QUERIES

log = logging.getLogger("tickwheel.scheduler.positions")

SOON_S = 0.5
IDLE_S = 1.0
LATER_S = 30.0
MAX_QUEUED = 200_000
BATCH = 5_000  # positions per statement
RETRY_S = 1.0

# tenant, job id, version, next occurrence (unix ms; None: complete)
Position = tuple[str, str, int, "int | None"]


class Positions:
    """The positions of one process's leaders, queued and written in batches."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._soon: dict[tuple[str, str], Position] = {}
        self._later: dict[tuple[str, str], Position] = {}
        self._ended: dict[tuple[str, str], Position] = {}
        self._counted: dict[tuple[str, str], tuple[str, str, int, int]] = {}
        self._last_claim = time.monotonic()
        self._oldest_later: float | None = None
        self._lock = asyncio.Lock()
        self.written = 0  # positions written since start (a metric's source)

    def claimed(self, positions: Iterable[Position], horizon_end_ms: int) -> None:
        """Queue the positions of jobs a claim found; a job's newer position replaces one
        still queued."""
        self._last_claim = time.monotonic()
        soon, later = self._soon, self._later
        for p in positions:
            key = (p[0], p[1])
            if p[3] is not None and p[3] >= horizon_end_ms:
                soon[key] = p
                later.pop(key, None)
            else:
                later[key] = p
                soon.pop(key, None)
        if later and self._oldest_later is None:
            self._oldest_later = time.monotonic()

    def ended(self, positions: Iterable[Position]) -> None:
        """Queue jobs whose window's last occurrence a claim found, to be deleted
        (`after_end: delete`)."""
        self._last_claim = time.monotonic()
        for p in positions:
            key = (p[0], p[1])
            self._soon.pop(key, None)
            self._later.pop(key, None)
            self._ended[key] = p

    def counted(
        self, counts: dict[tuple[str, str], tuple[int, int]], found: set[tuple[str, str]]
    ) -> None:
        """Queue what a claim counted of jobs with max_runs (`ClaimBatch.counted`: runs done
        and the instant they run through), for the jobs it found (`found`)."""
        for key, (done, through) in counts.items():
            old = self._counted.get(key)
            if key in found and (old is None or old[3] < through):
                self._counted[key] = (key[0], key[1], done, through)

    def queued(self) -> int:
        return len(self._soon) + len(self._later) + len(self._ended) + len(self._counted)

    async def flush_before(self, until_ms: int) -> None:
        """Write every queued position earlier than `until_ms` (a horizon extension's end):
        the slice it reads then finds them."""
        due = [p for p in self._soon.values() if p[3] is not None and p[3] < until_ms]
        if due:
            for p in due:
                self._soon.pop((p[0], p[1]), None)
            await self._write(due)

    async def flush_all(self) -> None:
        """Write everything queued (a clean stop)."""
        soon, later = list(self._soon.values()), list(self._later.values())
        self._soon.clear()
        self._later.clear()
        self._oldest_later = None
        await self._write(soon + later)
        await self._write_counts()
        await self._delete_ended()

    async def run(self, stop: asyncio.Event) -> None:
        """The writer: `soon` within SOON_S, `later` when idle, old or many."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SOON_S)
            try:
                await self._step()
            except db.DB_ERRORS:
                log.warning("writing job positions failed; retrying", exc_info=True)
                await asyncio.sleep(RETRY_S)
        try:
            await self.flush_all()
        except db.DB_ERRORS:
            log.warning("positions not written at stop; the next load derives them", exc_info=True)

    async def _step(self) -> None:
        await self._write_counts()
        await self._delete_ended()
        if self._soon:
            soon = list(self._soon.values())
            self._soon.clear()
            await self._write(soon)
        if not self._later:
            return
        now = time.monotonic()
        idle = now - self._last_claim >= IDLE_S
        old = self._oldest_later is not None and now - self._oldest_later >= LATER_S
        if idle or old or len(self._later) >= MAX_QUEUED:
            later = list(self._later.values())
            self._later.clear()
            self._oldest_later = None
            await self._write(later)

    async def _write(self, positions: list[Position]) -> None:
        """Write in statements of BATCH, one at a time in the process (two statements updating
        the same rows in different orders could deadlock); the lock is taken per statement, so
        `flush_before` waits for one statement of a long flush, not all of it. What fails goes
        back to the queue."""
        for start in range(0, len(positions), BATCH):
            part = positions[start : start + BATCH]
            try:
                async with self._lock:
                    await write_positions(self.pool, part)
            except BaseException:
                for p in positions[start:]:  # the next step writes them again
                    self._soon.setdefault((p[0], p[1]), p)
                raise
            self.written += len(part)

    async def _write_counts(self) -> None:
        await self._drain(
            False,
            self._counted,
            lambda part: (
                QUERIES["jobs_run_counts_write"],
                db.id_list([c[0] for c in part]),
                db.id_list([c[1] for c in part]),
                db.num_list([c[2] for c in part]),
                db.num_list([c[3] for c in part]),
            ),
        )

    async def _delete_ended(self) -> None:
        await self._drain(
            True,
            self._ended,
            lambda part: (
                QUERIES["jobs_end_delete"],
                db.id_list([p[0] for p in part]),
                db.id_list([p[1] for p in part]),
                db.num_list([p[2] for p in part]),
            ),
        )

    async def _drain(
        self,
        written: bool,
        queue: dict[tuple[str, str], Any],
        statement: Callable[[list[Any]], tuple[Any, ...]],
    ) -> None:
        """Write everything `queue` holds, BATCH items per statement under the lock; what a
        failed statement did not write goes back to the queue (the failure propagates).
        `written`: count the items in `self.written`."""
        items = list(queue.values())
        queue.clear()
        for start in range(0, len(items), BATCH):
            part = items[start : start + BATCH]
            try:
                async with self._lock:
                    await self.pool.execute(*statement(part))
            except BaseException:  # put back, then propagate: the writer's loop retries
                for item in items[start:]:
                    queue.setdefault((item[0], item[1]), item)
                raise
            if written:
                self.written += len(part)


async def write_positions(db_: asyncpg.Pool | asyncpg.Connection, part: Sequence[Position]) -> str:
    """One `jobs_positions` statement for `part` (forward only, over each claim's version, only
    while the job is active); its status (`UPDATE n`)."""
    status: str = await db_.execute(
        QUERIES["jobs_positions"],
        db.id_list([p[0] for p in part]),
        db.id_list([p[1] for p in part]),
        db.num_list([p[2] for p in part]),
        db.num_list([p[3] for p in part]),
    )
    return status
