"""Design B's statements, called as B's leader and worker would call them: the named blocks of
`run_path_b.sql` (`queries`) on the tables of `run_path_b_schema.sql` (`default_schema`), both
beside this file (docs/journal/run-path.md, *Design B*; DESIGN §3 I3, I4 as rewritten).

    b_claim_many      the leader's claim of several leaders' batches in one statement: per
                      leader, the runs inserted into `run_claims` (to publish), or FencedOut
                      when the shard's row no longer holds its lease — nothing of it written
    b_claim           the same for one leader's batch; FencedOut is raised
    b_open            the worker's batched read, before it runs, of which deliveries' runs are
                      still open at their attempt
    b_write_outcomes  the worker's one write: results inserted into `run_outcomes`, fenced by
                      nothing but the (run key, attempt) primary key; returns the runs written

Candidates, not the system's code: the statements harness of design B (statements_b.py) and
its guard checks (run_path_b_guards.py) are their only callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import asyncpg

from tickwheel import db
from tickwheel.bench.components.statements import SHARDS
from tickwheel.domain import RunStatus
from tickwheel.queries import parse_blocks
from tickwheel.sharding import shard_of
from tickwheel.shards.plan import ClaimBatch
from tickwheel.shards.store import Dispatch, FencedOut, Lease
from tickwheel.workers.store import Keys, Results, RunId

PENDING = RunStatus.PENDING.value
HERE = resources.files("tickwheel.bench.components")


@cache
def queries() -> dict[str, str]:
    """B's statements by name (`run_path_b.sql`)."""
    return parse_blocks(HERE.joinpath("run_path_b.sql").read_text())


def default_schema() -> str:
    return HERE.joinpath("run_path_b_schema.sql").read_text()


# --- the leader's claim ---------------------------------------------------------------------


def b_claim_params(
    claims: Sequence[tuple[Lease, ClaimBatch]],
    fences: Sequence[tuple[int, str | None]],
    lease_ms: int,
) -> list[Any]:
    """`b_claim`'s parameters: per leader its shard, epoch and fence; per run planned to go out
    (pending with a lease) its shard, key, the job's version as the wheel loaded it, its
    instant and the job's following occurrence. Runs the plan skips or buffers are not claims
    in B (a skipped occurrence is an outcome row, a buffered one a later claim): a caller
    writes them elsewhere; this harness's one-offs due on time have none."""
    shards: list[str] = []
    tenants: list[str] = []
    job_ids: list[str] = []
    versions: list[int] = []
    instants: list[int] = []
    following: list[int | None] = []
    for lease, b in claims:
        job_at = {key: i for i, key in enumerate(zip(b.tenants, b.job_ids, strict=True))}
        shard = str(lease.shard)
        for tenant, job_id, ms, status, leased in zip(
            b.run_tenants, b.run_job_ids, b.run_ms, b.run_status, b.run_leased, strict=True
        ):
            if status != PENDING or not leased:
                continue
            i = job_at[(tenant, job_id)]
            shards.append(shard)
            tenants.append(tenant)
            job_ids.append(job_id)
            versions.append(b.entries[i].version)
            instants.append(ms)
            following.append(b.next_ms[i])
    return [
        db.id_list(str(lease.shard) for lease, _ in claims),
        db.num_list([lease.epoch for lease, _ in claims]),
        db.num_list([epoch for epoch, _ in fences]),
        [owner for _, owner in fences],
        lease_ms,
        db.id_list(shards),
        db.id_list(tenants),
        db.id_list(job_ids),
        db.num_list(versions),
        db.num_list(instants),
        db.num_list(following),
    ]


async def b_claim_many(
    conn: asyncpg.Connection, lease_ms: int, claims: Sequence[tuple[Lease, ClaimBatch]]
) -> list[list[Dispatch] | FencedOut]:
    """B's claim of several leaders' batches (each of its own shard) in one statement, as
    shards/store.py `claim_many` makes today's: per claim, the runs inserted, to publish (a
    run whose job no longer matched, or whose instant was claimed already, is not among them),
    or FencedOut when the shard's row no longer holds its lease (nothing of it written)."""
    fences = [(lease.epoch, lease.owner) for lease, _ in claims]
    rows = await conn.fetch(queries()["b_claim"], *b_claim_params(claims, fences, lease_ms))
    # By position, in b_claim's column order (tenant, job_id, scheduled_at, priority, handler,
    # target, payload, timeout_ms, shard), as `claim_many` reads claim_due's.
    jobs: dict[tuple[str, str], asyncpg.Record] = {}
    inserted: list[asyncpg.Record] = []
    fenced: dict[int, FencedOut] = {}
    for row in rows:
        if row[0] is None:
            shard = row[8]
            epoch = next(lease.epoch for lease, _ in claims if lease.shard == shard)
            found = None if row[2] is None else (row[2], row[1])
            fenced[shard] = FencedOut(shard, epoch, found)
        elif row[2] is None:
            jobs[(row[0], row[1])] = row
        else:
            inserted.append(row)
    runs: dict[int, list[Dispatch]] = {}
    for row in inserted:
        job = jobs[(row[0], row[1])]
        dispatch = Dispatch(row[0], row[1], row[2], 1, job[3], job[4], job[5], job[6], job[7])
        runs.setdefault(row[8], []).append(dispatch)
    return [fenced.get(lease.shard) or runs.get(lease.shard, []) for lease, _ in claims]


async def b_claim(
    conn: asyncpg.Connection, lease: Lease, lease_ms: int, batch: ClaimBatch
) -> list[Dispatch]:
    """`b_claim_many` of one leader's batch; FencedOut is raised."""
    (outcome,) = await b_claim_many(conn, lease_ms, [(lease, batch)])
    if isinstance(outcome, FencedOut):
        raise outcome
    return outcome


# --- the worker's read and write ------------------------------------------------------------


async def b_open(pool: asyncpg.Pool, keys: Keys) -> list[asyncpg.Record]:
    """The deliveries of `keys` whose run is open at their attempt (`b_open_runs`)."""
    return list(
        await pool.fetch(
            queries()["b_open_runs"],
            db.id_list(keys.tenants),
            db.id_list(keys.job_ids),
            db.num_list(keys.scheduled_ms),
            db.num_list(keys.attempts),
        )
    )


async def b_write_outcomes(
    pool: asyncpg.Pool, results: Results, started_ms: list[int], worker: str
) -> set[RunId]:
    """Insert the results (`b_outcomes`); return the runs written (the rest had one)."""
    keys = results.keys
    rows = await pool.fetch(
        queries()["b_outcomes"],
        db.id_list(keys.tenants),
        db.id_list(keys.job_ids),
        db.num_list(keys.scheduled_ms),
        db.num_list(keys.attempts),
        db.id_list(results.statuses),
        # The job's shard, as every process computes it: an envelope does not carry it.
        db.num_list(
            [shard_of(t, j, SHARDS) for t, j in zip(keys.tenants, keys.job_ids, strict=True)]
        ),
        db.num_list(started_ms),
        db.num_list(results.retry_in_ms),
        results.errors if any(results.errors) else None,
        worker,
    )
    return {(r[0], r[1], r[2]) for r in rows}
