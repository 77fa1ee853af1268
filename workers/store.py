"""The worker's Postgres side: batched claims (I4), heartbeats and fenced result writes.

Every statement takes a batch of runs as parallel arrays (one round trip for many runs) and
names runs by their run key's parts; `workers/service.py` decides what to write. The arrays are
built once per batch (`Keys`), never as an object per run: a hot second passes 100,000 runs
through each statement.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import asyncpg

from tickwheel import broken
from tickwheel.db import DB_ERRORS, id_list, is_data_error, num_list
from tickwheel.domain import RunStatus
from tickwheel.envelopes.parsing import loads_exact
from tickwheel.queries import QUERIES

log = logging.getLogger("tickwheel.worker")

RunId = tuple[str, str, int]  # tenant, job_id, scheduled_at (unix ms)

# The statuses each statement matches, passed as parameters: with literals the planner may
# scan every run in flight instead of looking the batch up (tickwheel/sql/workers.sql).
CLAIMABLE = [RunStatus.PENDING.value, RunStatus.PUBLISHED.value]
RUNNING = RunStatus.RUNNING.value


class Claim(NamedTuple):
    """A run this worker now owns, as `worker_claim` returns it (the columns in this order):
    the attempt that fences its writes, its retry policy, and what to execute as the job's row
    holds it now (`timeout_ms` None: the job's row is gone)."""

    tenant: str
    job_id: str
    scheduled_ms: int
    attempt: int
    max_attempts: int | None  # None: a run started without a claim (read if it fails)
    started_ms: int  # unix ms: the database's clock for a claim, this host's without one
    backoff_base_ms: int | None  # None: a sealed claim, which reads no job row
    backoff_cap_ms: int | None
    handler: str | None
    target: str | None  # JSON text
    payload: str | None  # JSON text
    timeout_ms: int | None

    @property
    def run(self) -> RunId:
        return (self.tenant, self.job_id, self.scheduled_ms)

    def content(self) -> JobContent | None:
        """What to execute, decoded (None: the job's row is gone)."""
        if self.timeout_ms is None:  # NOT NULL in jobs: the LEFT JOIN found no job row
            return None
        return JobContent(
            self.handler,
            None if self.target is None else loads_exact(self.target),
            loads_exact(self.payload or "null"),
            self.timeout_ms,
        )


class Backoff(NamedTuple):
    """A job's retry backoff, milliseconds."""

    base_ms: int
    cap_ms: int


class RetryPolicy(NamedTuple):
    """A run's attempt budget and its job's backoff."""

    max_attempts: int
    backoff: Backoff


# A claim's answer: each run claimed, or None for a run its tenant's cap held back.
Claims = dict[RunId, "Claim | None"]


class JobContent(NamedTuple):
    """What a run executes, as its job's row holds it when the run is claimed."""

    handler: str | None
    target: dict[str, Any] | None
    payload: Any
    timeout_ms: int


@dataclass(slots=True)
class Keys:
    """Runs as parallel arrays, the shape every statement takes: their identities, the attempt
    of each, and for a claim the delivery's record timestamp (None: none)."""

    tenants: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    scheduled_ms: list[int] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    published_ms: list[int | None] = field(default_factory=list)

    def add(self, run: RunId, attempt: int, published_ms: int | None = None) -> None:
        self.tenants.append(run[0])
        self.job_ids.append(run[1])
        self.scheduled_ms.append(run[2])
        self.attempts.append(attempt)
        self.published_ms.append(published_ms)

    def __len__(self) -> int:
        return len(self.tenants)

    def part(self, start: int, stop: int) -> Keys:
        return Keys(
            self.tenants[start:stop],
            self.job_ids[start:stop],
            self.scheduled_ms[start:stop],
            self.attempts[start:stop],
            self.published_ms[start:stop],
        )

    def run(self, index: int) -> RunId:
        return (self.tenants[index], self.job_ids[index], self.scheduled_ms[index])


@dataclass(slots=True)
class Results:
    """Finished attempts as parallel arrays: the runs and attempts, and per run the status
    (succeeded | retrying | dead), the retry delay (retrying) and the error."""

    keys: Keys = field(default_factory=Keys)
    statuses: list[str] = field(default_factory=list)
    retry_in_ms: list[int | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    ran_ms: list[int] = field(default_factory=list)  # how long ago each attempt started

    def add(
        self,
        run: RunId,
        attempt: int,
        status: str,
        retry_in_ms: int | None,
        error: str | None,
        ran_ms: int = 0,
        published_ms: int | None = None,
    ) -> None:
        self.keys.add(run, attempt, published_ms)
        self.statuses.append(status)
        self.retry_in_ms.append(retry_in_ms)
        self.errors.append(error)
        self.ran_ms.append(ran_ms)

    def __len__(self) -> int:
        return len(self.statuses)


class RunStore:
    def __init__(self, pool: asyncpg.Pool, worker_id: str, lease_ms: int) -> None:
        self.pool = pool
        self.worker_id = worker_id
        self.lease_ms = lease_ms

    async def claim(self, keys: Keys, sealed: bool = False) -> Claims:
        """Claim what can be claimed; runs absent from the answer are duplicates or stale.
        `sealed`: the deliveries' seals opened (tickwheel/run_seal.py): their envelopes say
        what to run, and the claim reads no job row — its claims carry no content and no
        backoff (None; `backoffs` reads it for a failed attempt)."""
        if not keys:
            return {}
        name = "worker_claim_sealed" if sealed else "worker_claim"
        rows = await self.pool.fetch(
            QUERIES[broken.query(name, broken.CLAIM_IGNORES_LEASE)], *self._claim_params(keys)
        )
        new = tuple.__new__
        claims: Claims = {}
        if sealed:
            for row in rows:
                claim: Claim = new(Claim, (*row, None, None, None, None, None, None))
                claims[(claim[0], claim[1], claim[2])] = claim
            return claims
        for row in rows:
            claim = new(Claim, row)
            claims[(claim[0], claim[1], claim[2])] = claim
        return claims

    async def backoffs(self, jobs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Backoff]:
        """The retry backoff of each job (its row gone: the defaults)."""
        if not jobs:
            return {}
        rows = await self.pool.fetch(
            QUERIES["job_backoffs"], [j[0] for j in jobs], [j[1] for j in jobs]
        )
        return {(r[0], r[1]): Backoff(r[2], r[3]) for r in rows}

    def _claim_params(self, keys: Keys) -> tuple[Any, ...]:
        """$1..$8 of `worker_claim` (and of `worker_claim_capped`, `worker_mark_running`)."""
        return (
            id_list(keys.tenants),
            id_list(keys.job_ids),
            num_list(keys.scheduled_ms),
            num_list(keys.attempts),
            self.worker_id,
            self.lease_ms,
            num_list(keys.published_ms),
            CLAIMABLE,
        )

    async def claim_capped(self, keys: Keys, tenants: list[str], hold_ms: int) -> Claims:
        """`claim` for runs of capped tenants (`tenants`, the batch's): one transaction that
        locks the tenants' rows, then claims as many as each cap has free and holds back the
        rest (`worker_claim_capped`). Held runs map to None."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(QUERIES["tenant_cap_lock"], tenants)
            rows = await conn.fetch(
                QUERIES["worker_claim_capped"], *self._claim_params(keys), hold_ms, RUNNING
            )
        new = tuple.__new__
        claims: Claims = {}
        for row in rows:
            if row["held"]:
                claims[(row[0], row[1], row[2])] = None
            else:
                claim: Claim = new(Claim, tuple(row)[:-1])
                claims[(claim[0], claim[1], claim[2])] = claim
        return claims

    async def claim_isolating(
        self, keys: Keys, capped: tuple[list[str], int] | None = None, sealed: bool = False
    ) -> tuple[Claims, dict[tuple[RunId, int], str]]:
        """`claim` (or, given `capped` — the batch's capped tenants and the hold delay in ms —
        `claim_capped`), except that when the database refuses the statement for its data (a
        value the run row cannot hold that decoding let through), the halves are claimed apart
        until each culprit is alone: the rest of the batch is claimed. Returns the claims and,
        per refused (run, attempt), the database's reason. An unavailable database raises."""
        try:
            if capped is None:
                return await self.claim(keys, sealed), {}
            return await self.claim_capped(keys, *capped), {}
        except DB_ERRORS as exc:
            if not is_data_error(exc):
                raise
            if len(keys) == 1:
                return {}, {(keys.run(0), keys.attempts[0]): f"the database refused it: {exc}"}
            log.warning("a claim of %d runs was refused for its data; isolating it", len(keys))
        half = len(keys) // 2
        first, refused_first = await self.claim_isolating(keys.part(0, half), capped, sealed)
        second, refused_second = await self.claim_isolating(
            keys.part(half, len(keys)), capped, sealed
        )
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

    async def heartbeat(self, keys: Keys) -> int:
        """Extend the leases of running runs; return how many were extended."""
        if not keys:
            return 0
        status: str = await self.pool.execute(
            QUERIES["worker_heartbeat"],
            id_list(keys.tenants),
            id_list(keys.job_ids),
            num_list(keys.scheduled_ms),
            num_list(keys.attempts),
            self.worker_id,
            self.lease_ms,
            RUNNING,
        )
        return int(status.rsplit(" ", 1)[-1])

    async def write_results(self, results: Results) -> set[RunId]:
        """Write results fenced by attempt; return the runs written (the rest were fenced out)."""
        if not results:
            return set()
        keys = results.keys
        rows = await self.pool.fetch(
            QUERIES["worker_results"],
            id_list(keys.tenants),
            id_list(keys.job_ids),
            num_list(keys.scheduled_ms),
            num_list(keys.attempts),
            id_list(results.statuses),
            num_list(results.retry_in_ms),
            # Free text, so a real array; a batch of successes has no error at all.
            results.errors if any(results.errors) else None,
            RUNNING,
            self.worker_id,
            CLAIMABLE,
            num_list(results.ran_ms),
            num_list(keys.published_ms),
        )
        return {(r[0], r[1], r[2]) for r in rows}

    async def mark_running(self, keys: Keys, ran_ms: Sequence[int]) -> set[RunId]:
        """Mark runs started without a claim `running` under this worker with a lease (a long
        run at a heartbeat, or runs held while their partition is taken away); return the runs
        marked (the rest moved on: finished, claimed by another, a newer attempt)."""
        if not keys:
            return set()
        rows = await self.pool.fetch(
            QUERIES["worker_mark_running"], *self._claim_params(keys), num_list(ran_ms)
        )
        return {(r[0], r[1], r[2]) for r in rows}

    async def retry_policies(self, runs: Sequence[RunId]) -> dict[RunId, RetryPolicy]:
        """The attempt budget and backoff of runs started without a claim (failed attempts)."""
        if not runs:
            return {}
        rows = await self.pool.fetch(
            QUERIES["run_retry_policies"],
            [r[0] for r in runs],
            [r[1] for r in runs],
            [r[2] for r in runs],
        )
        return {(r[0], r[1], r[2]): RetryPolicy(r[3], Backoff(r[4], r[5])) for r in rows}
