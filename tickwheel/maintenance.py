"""Maintenance of the run ledger: daily `job_runs` partitions and retention (`tickwheel gc`).

Two callers: the leader of shard 0, which keeps the partitions of the coming days ready and
applies the retention daily (`Upkeep`, the timetable: partitions hourly, retention at its
takeover and then once a day), and operators, who run `tickwheel gc` (alias `tickwheel db
retention`) from cron or by hand. Both run the same `run_gc`.

What retention removes, given `retention_days` (the cutoff is the start of the UTC day
`retention_days` before today):

- run history: every daily `job_runs` partition that ends before the cutoff is dropped whole
  (`db.drop_partitions_before`; older finished rows of the default partition are deleted) — a
  dead run older than the retention can no longer be replayed. A run in flight is never
  removed: its day's partition stays until a later gc (migration 0007), since a leader
  catching up a long outage creates runs scheduled before the cutoff;
- completed one-off jobs whose instant and last change are both before the cutoff (their one
  run is older than the cutoff too, so it went with its partition); removed in batches of
  `JOB_BATCH` so that no statement holds many row locks for long;
- the per-run records of replays older than the cutoff (the replay summaries stay);
- trigger idempotency keys older than a day (they answer nothing after 24 hours anyway);
- the message ids of signed registrations past their expiry (their signature window, after
  which the intake refuses the message by its signing instant alone);
- the rows of target hosts and of jobs' own target limits that no call has written since the
  cutoff and whose state is a new row's (rate caught up, no failures, breaker closed): the
  next call adds the row again, so a job's limit row does not outlive the job;
- pause notes that are no longer their job's (it was resumed, paused again, edited or removed).

Running it twice removes nothing more; it is safe to run from several processes at once
(partition upkeep takes an advisory lock, job removal skips rows another remover holds).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from tickwheel.db import drop_partitions_before, ensure_partitions
from tickwheel.queries import QUERIES

JOB_BATCH = 1000  # one-off jobs removed per statement
PARTITIONS_INTERVAL_S = 3600.0  # seconds between partition upkeep runs of shard 0's leader
RETENTION_INTERVAL_S = 86_400.0  # seconds between its retention runs (and one at takeover)


@dataclass(frozen=True)
class GcReport:
    keep_from: dt.date  # UTC day: everything before it went
    dropped_partitions: list[str] = field(default_factory=list)
    removed_jobs: int = 0
    removed_replay_records: int = 0
    removed_trigger_keys: int = 0
    removed_registration_ids: int = 0
    removed_target_rows: int = 0
    removed_pause_notes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "keep_from": self.keep_from.isoformat(),
            "dropped_partitions": self.dropped_partitions,
            "removed_jobs": self.removed_jobs,
            "removed_replay_records": self.removed_replay_records,
            "removed_trigger_keys": self.removed_trigger_keys,
            "removed_registration_ids": self.removed_registration_ids,
            "removed_target_rows": self.removed_target_rows,
            "removed_pause_notes": self.removed_pause_notes,
        }


def cutoff_day(today: dt.date, retention_days: int) -> dt.date:
    """The first UTC day kept."""
    return today - dt.timedelta(days=retention_days)


async def run_gc(
    conn: asyncpg.Connection, *, retention_days: int, today: dt.date | None = None
) -> GcReport:
    """Apply a retention of `retention_days` (days); see the module docstring."""
    today = today or dt.datetime.now(dt.UTC).date()
    keep_from = cutoff_day(today, retention_days)
    cutoff = dt.datetime.combine(keep_from, dt.time(), tzinfo=dt.UTC)
    dropped = await drop_partitions_before(conn, keep_from)
    removed = 0
    while True:
        rows = await conn.fetch(QUERIES["gc_completed_once"], cutoff, JOB_BATCH)
        removed += len(rows)
        if len(rows) < JOB_BATCH:
            break
    status = await conn.execute(QUERIES["gc_replay_audit_runs"], cutoff)
    keys = await conn.execute(QUERIES["gc_trigger_requests"])
    ids = await conn.execute(QUERIES["gc_registration_ids"])
    targets = await conn.execute(QUERIES["gc_target_hosts"], cutoff)
    notes = await conn.execute(QUERIES["gc_pause_notes"])
    return GcReport(
        keep_from,
        dropped,
        removed,
        int(status.split()[-1]),
        int(keys.split()[-1]),
        int(ids.split()[-1]),
        int(targets.split()[-1]),
        int(notes.split()[-1]),
    )


@dataclass
class Upkeep:
    """Shard 0's leader's timetable for the maintenance: `run_due` from every sweep does what is
    due. One per leader: a new leader of shard 0 ensures partitions and applies the retention
    at its first sweep."""

    clock: Callable[[], float] = time.monotonic  # seconds, monotonic
    partitions_at: float | None = None  # when the partitions were last ensured
    retention_at: float | None = None  # when the retention last ran

    async def run_due(
        self, conn: asyncpg.Connection, retention_days: int
    ) -> tuple[int | None, GcReport | None]:
        """(partitions created, retention report), each None when it was not due."""
        created = report = None
        if self.partitions_at is None or self.clock() - self.partitions_at > PARTITIONS_INTERVAL_S:
            created = await ensure_partitions(conn)
            self.partitions_at = self.clock()
        if self.retention_at is None or self.clock() - self.retention_at > RETENTION_INTERVAL_S:
            # Marked before it runs: a retention that fails is tried again the next day, not at
            # every sweep (its error is the sweep's, logged there).
            self.retention_at = self.clock()
            report = await run_gc(conn, retention_days=retention_days)
        return created, report
