"""The shard leaders' Postgres side: takeover, the fence, horizon reads, claims and sweeps.

Every write runs inside `fenced(...)`: a transaction whose first statement share-locks the
shard's `shard_leaders` row and checks that its epoch and owner are still the caller's (I2). A
takeover bumps the epoch under that row's lock, so a leader that was paused past its ZooKeeper
session and resumes finds another epoch there and writes nothing (`FencedOut`). The claim,
a leader's most frequent write, is one statement that fences itself the same way (`claim`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import asyncpg
import orjson

from tickwheel import broken, db
from tickwheel.domain import OverlapPolicy, RunOrigin, run_key
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.queries import QUERIES
from tickwheel.shards.plan import ClaimBatch, JobEntry, RetryEntry

Conn = db.Conn  # the leaders use a pool

DB_ERRORS = db.DB_ERRORS  # one home: tickwheel/db.py

SWEEP_LIMIT = 5000  # runs one sweep statement handles at most (the next sweep takes the rest)
# How long a takeover waits for the shard's row before it ends a replaced leader's sessions
# that hold it; a predecessor's claim in flight commits well within it.
TAKEOVER_PATIENCE_S = 1.0  # seconds
APP_NAME_PREFIX = "tickwheel-scheduler/"


class FencedOut(Exception):
    """The shard's epoch or owner is no longer ours: another leader took over."""

    def __init__(self, shard: int, epoch: int, found: tuple[int, str | None] | None) -> None:
        super().__init__(f"shard {shard}: epoch {epoch} was fenced out (now {found})")
        self.shard = shard


@dataclass(frozen=True, slots=True)
class Lease:
    """Who leads a shard: the epoch taken at takeover and the owner written with it."""

    shard: int
    epoch: int
    owner: str
    # The previous leader did not step down cleanly (it died, was fenced out or lost its
    # session): its pending runs may never have been published, so they are adopted.
    adopt: bool = False


class Dispatch(NamedTuple):
    """A run to publish: its row's key and attempt, and what its envelope carries. A named
    tuple rather than a frozen dataclass: a leader makes one per run it claims, and a frozen
    dataclass writes each field through a guarded setattr."""

    tenant: str
    job_id: str
    scheduled_ms: int
    attempt: int
    priority: str
    handler: str | None
    target: str | None  # JSON text
    payload: str  # JSON text
    timeout_ms: int
    origin: str = RunOrigin.SCHEDULE  # how the run came to be (job_runs.origin)
    # unix ms: when a jittered occurrence was due (D-287), known to the claim that planned it;
    # None: due at its scheduled instant, or published again by the sweeper.
    due_ms: int | None = None

    def envelope(self, epoch: int) -> RunEnvelope:
        return RunEnvelope(
            run_key=run_key(self.tenant, self.job_id, self.scheduled_ms),
            tenant=self.tenant,
            job_id=self.job_id,
            scheduled_at=self.scheduled_ms,
            attempt=self.attempt,
            epoch=epoch,
            priority=self.priority,
            # The payload's JSON text goes into the envelope as it is (no decode/encode).
            payload=orjson.Fragment(self.payload),
            timeout_ms=self.timeout_ms,
            handler=self.handler,
            target=orjson.loads(self.target) if self.target is not None else None,
            origin=self.origin,
            due=self.due_ms,
        )


def entry_of(row: asyncpg.Record) -> JobEntry:
    return JobEntry.of(
        tenant=row["tenant"],
        job_id=row["job_id"],
        version=row["version"],
        next_ms=row["next_run_at"],
        kind=row["kind"],
        schedule=row["schedule"],
        timezone=row["timezone"],
        dst_gap=row["dst_gap"],
        dst_overlap=row["dst_overlap"],
        misfire_policy=row["misfire_policy"],
        grace_ms=row["misfire_grace_ms"],
        max_catchup=row["misfire_max_catchup"],
        overlap_policy=row["overlap_policy"],
        start_ms=row["start_ms"],
        end_ms=row["end_ms"],
        after_end=row["after_end"],
        max_runs=row["max_runs"],
        calendars=tuple(row["calendars"]) if row["calendars"] else None,
        jitter_ms=row["jitter_ms"] or 0,
    )


def _dispatch(row: asyncpg.Record, attempt: int | None = None) -> Dispatch:
    return Dispatch(
        tenant=row["tenant"],
        job_id=row["job_id"],
        scheduled_ms=row["scheduled_at"],
        attempt=row["attempt"] if attempt is None else attempt,
        priority=row["priority"],
        handler=row["handler"],
        target=row["target"],
        payload=row["payload"],
        timeout_ms=row["timeout_ms"],
        origin=row["origin"],
    )


def scheduler_app_name(owner: str) -> str:
    """The `application_name` of a scheduler process's sessions: how a takeover tells a
    replaced leader's session from anyone else's (`shard_end_blockers`)."""
    return f"{APP_NAME_PREFIX}{owner}"


async def take_over(
    conn: Conn,
    shard: int,
    owner: str,
    unblock: Callable[[int], Awaitable[None]] | None = None,
    patience_s: float = TAKEOVER_PATIENCE_S,
) -> Lease:
    """Bump the shard's epoch and write us as its owner (the takeover, I2). While it still
    waits for the shard's row, every `patience_s` it calls `unblock(our backend pid)`, which
    ends the replaced leader's sessions that hold the row (`end_blockers`)."""
    attempt = asyncio.ensure_future(conn.fetchrow(QUERIES["shard_take_over"], shard, owner))
    try:
        while unblock is not None:
            done, _ = await asyncio.wait({attempt}, timeout=patience_s)
            if done:
                break
            await unblock(conn.get_server_pid())
        row = await attempt
    finally:
        attempt.cancel()  # only if we were cancelled ourselves; a finished one ignores it
    assert row is not None  # an upsert always returns its row
    return Lease(shard, row["epoch"], owner, adopt=row["previous_owner"] is not None)


async def end_blockers(conn: Conn, waiting_pid: int) -> list[asyncpg.Record]:
    """Terminate the other scheduler processes' sessions the takeover on `waiting_pid`
    waits for."""
    return await conn.fetch(QUERIES["shard_end_blockers"], waiting_pid)


async def step_down(conn: Conn, lease: Lease) -> None:
    await conn.execute(QUERIES["shard_step_down"], lease.shard, lease.epoch, lease.owner)


@asynccontextmanager
async def fenced(conn: Conn, lease: Lease) -> AsyncIterator[Conn]:
    """A transaction that holds the shard's row share-locked and is ours, or FencedOut."""
    async with conn.transaction():
        row = await conn.fetchrow(QUERIES["shard_fence"], lease.shard)
        found = None if row is None else (row["epoch"], row["owner"])
        if found != await _fence(conn, lease):
            raise FencedOut(lease.shard, lease.epoch, found)
        yield conn


async def _fence(conn: Conn, lease: Lease) -> tuple[int, str | None]:
    """The epoch and owner a leader's write must find in its shard's row: its lease's. (The
    broken build `epoch_fence` reads them from the row instead, so that every write goes on.)"""
    if broken.on(broken.EPOCH_FENCE):
        row = await conn.fetchrow(QUERIES["shard_fence"], lease.shard)
        if row is not None:
            return row["epoch"], row["owner"]
    return lease.epoch, lease.owner


async def _versions_now(conn: Conn, batch: ClaimBatch) -> ClaimBatch:
    """The broken build `claim_ignores_version` only: `batch` at the versions its jobs' rows
    hold now, so that the claim matches an edited job's stale entry."""
    keys = list(zip(batch.tenants, batch.job_ids, strict=True))
    now = {(r["tenant"], r["job_id"]): r["version"] for r in await jobs_by_keys(conn, keys)}
    versions = [now.get(key, v) for key, v in zip(keys, batch.versions, strict=True)]
    return dataclasses.replace(batch, versions=versions)


async def horizon(
    conn: Conn, shard: int, until_ms: int
) -> tuple[list[tuple[JobEntry, int | None]], list[RetryEntry]]:
    """The shard's active jobs and retrying runs due before `until_ms`, from one snapshot; each
    job with the latest occurrence claimed from its `next_run_at` on (None: none)."""
    jobs, retries = await _with_retries(conn, shard, until_ms, "horizon_jobs", 0, until_ms)
    return [(entry_of(r), r["claimed_through"]) for r in jobs], retries


async def horizon_versions(
    conn: Conn, shard: int, until_ms: int
) -> tuple[list[asyncpg.Record], list[RetryEntry]]:
    """The shard's active jobs due before `until_ms` as (tenant, job_id, version, next_run_at)
    rows, and its retrying runs due before it, from one snapshot: the full reload's first
    read, which decodes no job."""
    return await _with_retries(conn, shard, until_ms, "horizon_versions", until_ms)


async def _with_retries(
    conn: Conn, shard: int, until_ms: int, query: str, *args: Any
) -> tuple[list[asyncpg.Record], list[RetryEntry]]:
    """`query` ($1 the shard, then `args`) and the shard's retrying runs due before
    `until_ms`, read in one snapshot."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        rows = await conn.fetch(QUERIES[query], shard, *args)
        retries = await conn.fetch(QUERIES["horizon_retries"], shard, until_ms)
    return list(rows), [_retry_entry(r) for r in retries]


async def horizon_slice(conn: Conn, shard: int, from_ms: int, until_ms: int) -> list[JobEntry]:
    """The shard's active jobs due in [`from_ms`, `until_ms`): what the horizon newly covers."""
    rows = await conn.fetch(QUERIES["horizon_jobs"], shard, from_ms, until_ms)
    return [entry_of(r) for r in rows]


def _retry_entry(row: asyncpg.Record) -> RetryEntry:
    return RetryEntry(
        row["tenant"], row["job_id"], row["scheduled_at"], row["retry_at"], row["attempt"]
    )


async def retries(conn: Conn, shard: int, until_ms: int) -> list[RetryEntry]:
    """The shard's retrying runs due before `until_ms` (the sweeper's look-ahead)."""
    rows = await conn.fetch(QUERIES["horizon_retries"], shard, until_ms)
    return [_retry_entry(r) for r in rows]


async def jobs_by_keys(conn: Conn, keys: Sequence[tuple[str, str]]) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(QUERIES["jobs_by_keys"], [k[0] for k in keys], [k[1] for k in keys])
    )


async def in_flight(
    conn: Conn, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], tuple[int, int]]:
    """(running, buffered) runs in flight per job, for the overlap policies."""
    rows = await conn.fetch(QUERIES["runs_in_flight"], [k[0] for k in keys], [k[1] for k in keys])
    return {(r["tenant"], r["job_id"]): (r["running"], r["buffered"]) for r in rows}


async def plan_reads(
    pool: asyncpg.Pool, chunk: Sequence[JobEntry]
) -> tuple[
    dict[tuple[str, str], tuple[int, int]] | None, dict[tuple[str, str], tuple[int, int]] | None
]:
    """What planning a claim of `chunk` reads of the ledger, in one connection and only for
    the jobs that need it: runs in flight of jobs with an overlap policy (`in_flight`), and the
    runs so far of jobs with max_runs (`run_counts`, read at each claim: exact)."""
    keys = [e.ids for e in chunk if e.overlap_policy != OverlapPolicy.ALLOW]
    limited = [e for e in chunk if e.rules.max_runs is not None]
    if not keys and not limited:
        return None, None
    async with pool.acquire() as conn:
        counts = await in_flight(conn, keys) if keys else None
        done = await run_counts(conn, limited) if limited else None
    return counts, done


async def run_counts(
    conn: Conn, entries: Sequence[JobEntry]
) -> dict[tuple[str, str], tuple[int, int]]:
    """Per job with max_runs, its counted runs before the instant its entry is due at, and the
    instant the count starts from."""
    rows = await conn.fetch(
        QUERIES["jobs_run_counts_read"],
        db.id_list([e.tenant for e in entries]),
        db.id_list([e.job_id for e in entries]),
        db.num_list([e.next_ms for e in entries]),
    )
    return {(r["tenant"], r["job_id"]): (r["done"], r["since"]) for r in rows}


@dataclass(slots=True)
class Claimed:
    """What a claim committed: the jobs it found as the wheel knew them (their runs inserted,
    or there already: a repeated claim) and the runs to publish."""

    jobs: set[tuple[str, str]]
    runs: list[Dispatch]


async def claim(conn: Conn, lease: Lease, lease_ms: int, batch: ClaimBatch) -> Claimed:
    """The claim statement, fenced by itself (I2; outside a transaction: it is one): find the
    jobs as the wheel knew them (read, not written: D-269) and insert the planned run rows —
    or, when the shard's row no longer holds `lease`, write nothing and raise FencedOut."""
    (outcome,) = await claim_many(conn, lease_ms, [(lease, batch)])
    if isinstance(outcome, FencedOut):
        raise outcome
    return outcome


async def claim_many(
    conn: Conn, lease_ms: int, claims: Sequence[tuple[Lease, ClaimBatch]]
) -> list[Claimed | FencedOut]:
    """Several leaders' claims (each of its own shard) in one statement, one transaction: each
    fenced by itself, so a leader fenced out gets FencedOut (nothing of its batch written)
    while the others' claims commit. One outcome per claim, in order."""
    fences = [await _fence(conn, lease) for lease, _ in claims]
    if broken.on(broken.CLAIM_IGNORES_VERSION):
        claims = [(lease, await _versions_now(conn, batch)) for lease, batch in claims]
    rows = await conn.fetch(QUERIES["claim_due"], *claim_params(claims, fences, lease_ms))
    # By position, in claim_due's column order (tenant, job_id, scheduled_at, priority,
    # handler, target, payload, timeout_ms, shard): a leader reads every row of a hot second.
    jobs: dict[tuple[str, str], asyncpg.Record] = {}
    pending: list[asyncpg.Record] = []
    fenced: dict[int, FencedOut] = {}
    for row in rows:
        if row[0] is None:  # a fence failed: the shard's owner and epoch, nothing written
            shard = row[8]
            epoch = next(lease.epoch for lease, _ in claims if lease.shard == shard)
            found = None if row[2] is None else (row[2], row[1])
            fenced[shard] = FencedOut(shard, epoch, found)
        elif row[2] is None:
            jobs[(row[0], row[1])] = row
        else:
            pending.append(row)
    runs: dict[int, list[Dispatch]] = {}
    for row in pending:
        tenant, job_id = row[0], row[1]
        job = jobs[(tenant, job_id)]
        dispatch = Dispatch(tenant, job_id, row[2], 1, job[3], job[4], job[5], job[6], job[7])
        runs.setdefault(row[8], []).append(dispatch)
    if len(claims) == 1:
        lease, _ = claims[0]
        if lease.shard in fenced:
            return [fenced[lease.shard]]
        return [Claimed(set(jobs), runs.get(lease.shard, []))]
    claimed_by_shard: dict[int, set[tuple[str, str]]] = {}
    for key, row in jobs.items():
        claimed_by_shard.setdefault(row[8], set()).add(key)
    return [
        fenced[lease.shard]
        if lease.shard in fenced
        else Claimed(claimed_by_shard.get(lease.shard, set()), runs.get(lease.shard, []))
        for lease, _ in claims
    ]


def claim_params(
    claims: Sequence[tuple[Lease, ClaimBatch]],
    fences: Sequence[tuple[int, str | None]],
    lease_ms: int,
) -> list[Any]:
    """`claim_due`'s parameters for the claims, each fenced by the (epoch, owner) beside it."""
    job_shards: list[str] = []
    for lease, batch in claims:
        job_shards += [str(lease.shard)] * len(batch.tenants)
    return [
        db.id_list(str(lease.shard) for lease, _ in claims),
        db.num_list([lease.epoch for lease, _ in claims]),
        db.num_list([epoch for epoch, _ in fences]),
        [owner for _, owner in fences],
        lease_ms,
        db.id_list(job_shards),
        *_joined(claims),
    ]


def _joined(claims: Sequence[tuple[Lease, ClaimBatch]]) -> list[Any]:
    """The claims' batches as one statement's job and run parameters ($7 to $15)."""
    if len(claims) == 1:
        b = claims[0][1]
    else:
        b = ClaimBatch()
        for _, one in claims:
            b.tenants += one.tenants
            b.job_ids += one.job_ids
            b.versions += one.versions
            b.run_tenants += one.run_tenants
            b.run_job_ids += one.run_job_ids
            b.run_ms += one.run_ms
            b.run_status += one.run_status
            b.run_reason += one.run_reason
            b.run_leased += one.run_leased
    return [
        db.id_list(b.tenants),
        db.id_list(b.job_ids),
        db.num_list(b.versions),
        db.id_list(b.run_tenants),
        db.id_list(b.run_job_ids),
        db.num_list(b.run_ms),
        db.id_list(b.run_status),
        b.run_reason if any(b.run_reason) else None,
        db.flag_list(b.run_leased),
    ]


async def adopt(conn: Conn, lease: Lease, lease_ms: int) -> list[Dispatch]:
    """Pending runs an earlier epoch dispatched (inside `fenced`): ours now, to publish."""
    rows = await conn.fetch(
        QUERIES["outbox_adopt"], lease.shard, lease.epoch, lease_ms, SWEEP_LIMIT
    )
    return [_dispatch(r) for r in rows]


async def sweep_republish(conn: Conn, lease: Lease, lease_ms: int) -> list[Dispatch]:
    rows = await conn.fetch(
        QUERIES["sweep_republish"], lease.shard, lease.epoch, lease_ms, SWEEP_LIMIT
    )
    return [_dispatch(r) for r in rows]


async def sweep_requeue_running(conn: Conn, lease: Lease, lease_ms: int) -> list[Dispatch]:
    rows = await conn.fetch(
        QUERIES["sweep_requeue_running"], lease.shard, lease.epoch, lease_ms, SWEEP_LIMIT
    )
    return [_dispatch(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Dead:
    """A run the sweeper declared dead: its envelope's parts, the error and when."""

    run: Dispatch
    epoch: int
    error: str
    dead_at_ms: int


async def sweep_dead_running(conn: Conn, lease: Lease) -> list[Dead]:
    rows = await conn.fetch(QUERIES["sweep_dead_running"], lease.shard, SWEEP_LIMIT)
    return [Dead(_dispatch(r), r["epoch"], r["last_error"], r["dead_at"]) for r in rows]


async def claim_retries(
    conn: Conn, lease: Lease, lease_ms: int, due: Sequence[RetryEntry]
) -> list[Dispatch]:
    rows = await conn.fetch(
        QUERIES["retries_claim"],
        lease.shard,
        lease.epoch,
        lease_ms,
        [r.tenant for r in due],
        [r.job_id for r in due],
        [r.scheduled_ms for r in due],
        [r.retry_ms for r in due],
    )
    return [_dispatch(r) for r in rows]


async def release_buffered(conn: Conn, lease: Lease, lease_ms: int) -> list[Dispatch]:
    rows = await conn.fetch(QUERIES["buffered_release"], lease.shard, lease.epoch, lease_ms)
    return [_dispatch(r) for r in rows]


async def has_unadopted(conn: Conn, lease: Lease) -> bool:
    """Whether dispatched pending runs of an earlier epoch are left to adopt."""
    found: bool = await conn.fetchval(QUERIES["shard_has_unadopted"], lease.shard, lease.epoch)
    return found


async def has_lapsed(conn: Conn, shard: int) -> bool:
    """Whether a run of the shard has a lapsed lease (the sweeps have work)."""
    found: bool = await conn.fetchval(QUERIES["shard_has_lapsed"], shard)
    return found


async def has_buffered(conn: Conn, shard: int) -> bool:
    found: bool = await conn.fetchval(QUERIES["shard_has_buffered"], shard)
    return found


async def overlap_policies(
    conn: Conn, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """The overlap policy of each of these jobs whose policy is not `allow`."""
    rows = await conn.fetch(
        QUERIES["first_dispatch_overlap"], [k[0] for k in keys], [k[1] for k in keys]
    )
    return {(r["tenant"], r["job_id"]): r["overlap_policy"] for r in rows}


def _retry_arrays(due: Sequence[RetryEntry]) -> list[list[Any]]:
    return [
        [r.tenant for r in due],
        [r.job_id for r in due],
        [r.scheduled_ms for r in due],
        [r.retry_ms for r in due],
    ]


async def hold_first_dispatches(conn: Conn, lease: Lease, due: Sequence[RetryEntry]) -> int:
    """Attempt-0 runs held by overlap buffer_one (inside `fenced`): how many were held."""
    rows = await conn.fetch(QUERIES["retries_hold"], lease.shard, lease.epoch, *_retry_arrays(due))
    return len(rows)


async def skip_first_dispatches(
    conn: Conn, lease: Lease, reason: str, due: Sequence[RetryEntry]
) -> int:
    """Attempt-0 runs recorded skipped with `reason` (inside `fenced`): how many."""
    rows = await conn.fetch(QUERIES["retries_skip"], lease.shard, reason, *_retry_arrays(due))
    return len(rows)
