"""Retention: `tickwheel gc`, and `run_gc` for the scheduler to call daily under shard 0's lead.

What goes, given `retention_days` (the cutoff is the start of the UTC day `retention_days`
before today):

- run history: every daily `job_runs` partition that ends before the cutoff is dropped whole
  (`db.drop_partitions_before`; older finished rows of the default partition are deleted) — a
  dead run older than the retention can no longer be replayed. A run in flight is never
  removed: its day's partition stays until a later gc (migration 0007), since a leader
  catching up a long outage creates runs scheduled before the cutoff;
- completed one-off jobs whose instant and last change are both before the cutoff (their one
  run is older than the cutoff too, so it went with its partition); removed in batches of
  `JOB_BATCH` so that no statement holds many row locks for long;
- the per-run records of replays older than the cutoff (the replay summaries stay);
- trigger idempotency keys older than a day (they answer nothing after 24 hours anyway).

Running it twice removes nothing more; it is safe to run from several processes at once
(partition upkeep takes an advisory lock, job removal skips rows another remover holds).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from tickwheel.db import drop_partitions_before
from tickwheel.queries import QUERIES

JOB_BATCH = 1000  # one-off jobs removed per statement


@dataclass(frozen=True)
class GcReport:
    keep_from: dt.date  # UTC day: everything before it went
    dropped_partitions: list[str] = field(default_factory=list)
    removed_jobs: int = 0
    removed_replay_records: int = 0
    removed_trigger_keys: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "keep_from": self.keep_from.isoformat(),
            "dropped_partitions": self.dropped_partitions,
            "removed_jobs": self.removed_jobs,
            "removed_replay_records": self.removed_replay_records,
            "removed_trigger_keys": self.removed_trigger_keys,
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
    keys = await conn.execute(QUERIES["trigger_requests_gc"])
    return GcReport(keep_from, dropped, removed, int(status.split()[-1]), int(keys.split()[-1]))
