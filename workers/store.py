"""The worker's Postgres side: batched claims (I4), heartbeats and fenced result writes.

Every statement takes a batch of runs as parallel arrays (one round trip for many runs) and
names runs by their run key's parts; `workers/service.py` decides what to write.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from tickwheel import broken
from tickwheel.db import DB_ERRORS, is_data_error
from tickwheel.domain import RunStatus
from tickwheel.envelopes import loads_exact
from tickwheel.queries import QUERIES

log = logging.getLogger("tickwheel.worker")

RunId = tuple[str, str, int]  # tenant, job_id, scheduled_at (unix ms)

# The statuses each statement matches, passed as parameters: with literals the planner may
# scan every run in flight instead of looking the batch up (tickwheel/sql/workers.sql).
CLAIMABLE = [RunStatus.PENDING.value, RunStatus.PUBLISHED.value]
RUNNING = RunStatus.RUNNING.value


@dataclass(frozen=True)
class JobContent:
    """What a run executes, as its job's row holds it when the run is claimed."""

    handler: str | None
    target: dict[str, Any] | None
    payload: Any
    timeout_ms: int


@dataclass(frozen=True)
class Claim:
    """A run this worker now owns: the attempt that fences its writes, its retry policy, and
    what to execute (None: the job's row is gone)."""

    attempt: int
    max_attempts: int
    started_ms: int  # database clock, unix ms
    backoff_base_ms: int
    backoff_cap_ms: int
    job: JobContent | None


def _content(row: asyncpg.Record) -> JobContent | None:
    if row["timeout_ms"] is None:  # NOT NULL in jobs: the LEFT JOIN found no job row
        return None
    target = row["target"]
    return JobContent(
        row["handler"],
        None if target is None else loads_exact(target),
        loads_exact(row["payload"]),
        row["timeout_ms"],
    )


@dataclass(frozen=True)
class Attempted:
    """A run to claim, or whose lease to extend: its identity and the attempt."""

    run: RunId
    attempt: int
    published_ms: int | None = None  # a claim's delivery: its record timestamp


@dataclass(frozen=True)
class ResultRow:
    run: RunId
    attempt: int
    status: str  # succeeded | retrying | dead
    retry_in_ms: int | None
    error: str | None


def _columns(items: Sequence[Attempted]) -> tuple[list[str], list[str], list[int], list[int]]:
    return (
        [i.run[0] for i in items],
        [i.run[1] for i in items],
        [i.run[2] for i in items],
        [i.attempt for i in items],
    )


class RunStore:
    def __init__(self, pool: asyncpg.Pool, worker_id: str, lease_ms: int) -> None:
        self.pool = pool
        self.worker_id = worker_id
        self.lease_ms = lease_ms

    async def claim(self, items: Sequence[Attempted]) -> dict[RunId, Claim]:
        """Claim what can be claimed; runs absent from the answer are duplicates or stale."""
        if not items:
            return {}
        rows = await self.pool.fetch(
            QUERIES[broken.query("worker_claim", broken.CLAIM_IGNORES_LEASE)],
            *_columns(items),
            self.worker_id,
            self.lease_ms,
            [i.published_ms for i in items],
            CLAIMABLE,
        )
        return {
            (r["tenant"], r["job_id"], r["scheduled_ms"]): Claim(
                r["attempt"],
                r["max_attempts"],
                r["started_ms"],
                r["backoff_base_ms"],
                r["backoff_cap_ms"],
                _content(r),
            )
            for r in rows
        }

    async def claim_isolating(
        self, items: Sequence[Attempted]
    ) -> tuple[dict[RunId, Claim], dict[tuple[RunId, int], str]]:
        """`claim`, except that when the database refuses the statement for its data (a value
        the run row cannot hold that decoding let through), the halves are claimed apart until
        each culprit is alone: the rest of the batch is claimed. Returns the claims and, per
        refused (run, attempt), the database's reason. An unavailable database raises."""
        try:
            return await self.claim(items), {}
        except DB_ERRORS as exc:
            if not is_data_error(exc):
                raise
            if len(items) == 1:
                return {}, {(items[0].run, items[0].attempt): f"the database refused it: {exc}"}
            log.warning("a claim of %d runs was refused for its data; isolating it", len(items))
        half = len(items) // 2
        first, refused_first = await self.claim_isolating(items[:half])
        second, refused_second = await self.claim_isolating(items[half:])
        return first | second, refused_first | refused_second

    async def statuses(self, runs: Sequence[RunId]) -> dict[RunId, tuple[str, int, bool]]:
        """(status, attempt, held back by buffer_one) of each run that has a row."""
        if not runs:
            return {}
        rows = await self.pool.fetch(
            QUERIES["worker_run_statuses"],
            [r[0] for r in runs],
            [r[1] for r in runs],
            [r[2] for r in runs],
        )
        return {
            (r["tenant"], r["job_id"], r["scheduled_ms"]): (r["status"], r["attempt"], r["held"])
            for r in rows
        }

    async def heartbeat(self, items: Sequence[Attempted]) -> int:
        """Extend the leases of running runs; return how many were extended."""
        if not items:
            return 0
        status: str = await self.pool.execute(
            QUERIES["worker_heartbeat"], *_columns(items), self.worker_id, self.lease_ms, RUNNING
        )
        return int(status.rsplit(" ", 1)[-1])

    async def write_results(self, results: Sequence[ResultRow]) -> set[RunId]:
        """Write results fenced by attempt; return the runs written (the rest were fenced out)."""
        if not results:
            return set()
        rows = await self.pool.fetch(
            QUERIES["worker_results"],
            [r.run[0] for r in results],
            [r.run[1] for r in results],
            [r.run[2] for r in results],
            [r.attempt for r in results],
            [r.status for r in results],
            [r.retry_in_ms for r in results],
            [r.error for r in results],
            RUNNING,
        )
        return {(r["tenant"], r["job_id"], r["scheduled_ms"]) for r in rows}
