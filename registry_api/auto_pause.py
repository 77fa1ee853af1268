"""Pause on failure (issue 50): a cron job with `pause_after_dead_runs` N is paused after N
consecutive dead runs, with a note saying so (D-283).

A part of every registry process: every `INTERVAL_S` it asks the ledger which active jobs with
the setting had a run die since it last asked (`auto_pause_due`, through the dead runs' index)
and whose N latest finished runs since the job's last change all died, and pauses each one
through the registry's own path — the state machine, a new version the change feed carries to
the leaders, the note on that version — in one transaction per job. The pause is made over the
version the query saw: a job edited or resumed meanwhile is not paused (its count starts over).
Several registry processes may find the same job; the first pause wins and the others find it
paused (nothing written, nothing counted).

The dead runs are read from a little before the last read (`OVERLAP_MS`: a worker's result
transaction can commit after a later one), and at start from `LOOKBACK_MS` back, so a death
while no registry ran is still seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tickwheel import db
from tickwheel.domain import JobStatus, RegistrationOp, run_key
from tickwheel.queries import QUERIES
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied, RegistryStore

log = logging.getLogger("tickwheel.registry.auto_pause")

INTERVAL_S = 2.0
OVERLAP_MS = 60_000
LOOKBACK_MS = 3_600_000
PAUSED_BY = "tickwheel (pause_after_dead_runs)"


def note_reason(n: int, last_dead_key: str) -> str:
    """The pause note's why."""
    runs = "a run" if n == 1 else f"{n} consecutive runs"
    return f"paused after {runs} died (pause_after_dead_runs: {n}); the last: {last_dead_key}"


class AutoPause:
    """The part that pauses jobs on failure; `paused` counts per tenant (a metric's source)."""

    def __init__(self, store: RegistryStore, on_pause: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.on_pause = on_pause
        self._since_ms: int | None = None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.step()
            except db.DB_ERRORS:
                log.warning("pause on failure: reading the ledger failed; retrying", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), INTERVAL_S)

    async def step(self) -> int:
        """One look at the ledger; returns how many jobs it paused."""
        pool = self.store.pool
        now = int(await pool.fetchval(QUERIES["on_demand_db_now"]))
        since = now - LOOKBACK_MS if self._since_ms is None else self._since_ms - OVERLAP_MS
        rows = await pool.fetch(QUERIES["auto_pause_due"], since)
        paused, failed = 0, False
        for row in rows:
            try:
                if await self._pause(
                    row["tenant"], row["job_id"], row["version"], row["n"], row["last_dead_ms"]
                ):
                    paused += 1
            except Exception:  # one job that cannot be paused does not hold the others back
                log.exception(
                    "pause on failure: pausing a job failed; the next look tries again",
                    extra={"tenant": row["tenant"], "job_id": row["job_id"]},
                )
                failed = True
        if not failed:  # else the next look reads the same deaths again
            self._since_ms = now
        return paused

    async def _pause(self, tenant: str, job_id: str, version: int, n: int, last_ms: int) -> bool:
        reason = note_reason(n, run_key(tenant, job_id, last_ms))

        async def within(conn: db.Conn, results: list[Applied]) -> None:
            [applied] = results
            job = applied.job
            if applied.outcome == Outcome.PAUSED and job is not None:
                await conn.execute(
                    QUERIES["job_pause_note_write"], tenant, job_id, job.version, PAUSED_BY, reason
                )

        # Over the version the query saw: an edit or a resume since makes this op stale.
        op = Op(RegistrationOp.PAUSE.value, tenant, job_id, version=version + 1)
        [applied] = await self.store.apply([op], quotas=False, within=within)
        if applied.outcome != Outcome.PAUSED or applied.job is None:
            return False
        assert applied.job.status == JobStatus.PAUSED
        log.warning(
            "job paused on failure",
            extra={"tenant": tenant, "job_id": job_id, "dead_runs": n, "reason": reason},
        )
        if self.on_pause is not None:
            self.on_pause(tenant)
        return True
