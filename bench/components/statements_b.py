"""Design B's hot statements beside today's, alternating round by round on fresh databases.

Design B (docs/journal/run-path.md, *Design B*; DESIGN §3 I3, I4 as rewritten) writes a run
twice, both times an INSERT into a narrow table: the leader's claim inserts the run's row into
`run_claims` after a key read of the job (no write of the job's row, no lock), and the worker,
after running the delivery, inserts its result into `run_outcomes`. The candidate schema is
`run_path_b_schema.sql`, the statements are the named blocks of `run_path_b.sql`, both beside
this file. One invocation measures, alternating round by round (ABBA: today first in odd
rounds, B first in even ones), each side on a new scratch database of the dev stack with N
one-off jobs due at one instant:

    today   the statements harness's round (`statements.py` `_round`): the leader's claim
            (`claim_due`, `--claim` per statement), the worker's claim (`--start N`: only
            suspect deliveries take it, D-268; none by default), the result write
            (`--result`), and the floor's two statements beside them
    B       B claim     the leader's claim (`b_claim`): the fence, a primary-key read of each
                        due job's version and status, the INSERT into run_claims … ON CONFLICT
                        DO NOTHING RETURNING; exactly `--b-claim` runs per statement (5,000:
                        no dispatch window, run-path.md §3.4), several shards' in one as the
                        claim combiner (shards/claims.py) sends them — one shard holds only
                        ~1,560 of 100,000 jobs — planned by `plan_claims` as today's claim is.
                        Today's claims are one shard's `--claim` (344) each, as measured since
                        session 11; `--claim 5000 --claim-across-shards` gives today's claim
                        B's statement size, to tell the batch's gain from the schema's
            B check     the worker's read before it runs (`b_open_runs`, DESIGN I4: "checks,
                        by a batched read, that the run is still open at the delivered
                        attempt"), `--b-check` per statement; not one of run-path.md's two
                        statements, so measured apart (`--b-check 0` leaves it out)
            B outcome   the worker's one write (`b_outcomes`), `--b-outcome` per statement,
                        fenced by nothing but the (run key, attempt) primary key

Each phase reports, per run, as `statements.py` does: the CPU of the session's Postgres server
process (from /proc: run it on the database's host), this process's CPU (planning, encoding,
decoding), the wall time, and the WAL — the server's (every database's writes during the
phase: inflated by anything else running) and the phase's statements' own (pg_stat_statements
of the round's database). Every phase checks that it wrote (or found) every run, and each
round's database is checked at its end. Nothing is asserted about the figures.

`--check` first runs the correctness checks of B's statements on a small database of its own
(stale epoch, stale owner, a job's version or status changed, a repeated claim, repeated and
late results, the open check, the plans) and stops with exit status 1 if one fails;
`--rounds 0 --check` runs only those.

    .venv/bin/python -m tickwheel.bench.components.statements_b --jobs 100000 --rounds 3 \\
        [--claim 344] [--b-claim 5000] [--b-check 500] [--b-outcome 500] \\
        [--b-schema bench/components/run_path_b_schema_flat.sql] [--setup FILE] \\
        [--check] [--json docs/results/statements_b.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache, partial
from importlib import resources
from typing import Any

import asyncpg

from tickwheel import db
from tickwheel.bench.components.statements import (
    OWNER,
    PUBLISH_LEASE_MS,
    SHARDS,
    Phase,
    _in_batches,
    _lead_every_shard,
    _phase,
    _round,
    _table,
    packed,
    round_database,
)
from tickwheel.bench.scratch import TENANT
from tickwheel.clock import now_ms
from tickwheel.config import load_settings
from tickwheel.domain import RunStatus
from tickwheel.queries import parse_blocks
from tickwheel.schedule import ScheduleCache
from tickwheel.sharding import shard_of
from tickwheel.shards import store as leader_store
from tickwheel.shards.plan import ClaimBatch, JobEntry, plan_claims
from tickwheel.shards.store import Dispatch, FencedOut, Lease
from tickwheel.workers.store import Keys, Results, RunId

B_CLAIM = 5000  # runs per B claim statement: no dispatch window (run-path.md §3.4)
B_CHECK = 500  # deliveries per open check: a consumed batch, as the floor's consumers take
B_OUTCOME = 500  # results per outcome statement
CHECK_JOBS = 2000  # jobs of the --check database
PENDING = RunStatus.PENDING.value
SUCCEEDED = RunStatus.SUCCEEDED.value
RETRYING = RunStatus.RETRYING.value
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


async def _b_claims(
    conn: asyncpg.Connection,
    shards: list[tuple[Lease, list[JobEntry]]],
    size: int,
    created: list[RunId],
) -> int:
    """Every shard's jobs claimed by `b_claim`, exactly `size` per statement (the last one
    fewer), several shards' in one (`packed`, as the claim combiner sends them); every one must
    be inserted. Returns the number of statements."""
    cache_ = ScheduleCache()
    calls = 0
    for statement in packed(shards, size):
        # Planned at the jobs' instant: each one-off runs once, nothing misfires.
        batches = [
            (lease, plan_claims(chunk, chunk[0].next_ms, cache_)) for lease, chunk in statement
        ]
        outcomes = await b_claim_many(conn, PUBLISH_LEASE_MS, batches)
        calls += 1
        for (lease, chunk), outcome in zip(statement, outcomes, strict=True):
            if isinstance(outcome, FencedOut) or len(outcome) != len(chunk):
                raise RuntimeError(f"shard {lease.shard}: B claimed {outcome!r} of {len(chunk)}")
            created.extend((r.tenant, r.job_id, r.scheduled_ms) for r in outcome)
    return calls


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


async def _open(pool: asyncpg.Pool, batch: list[RunId]) -> int:
    keys = Keys()
    for run in batch:
        keys.add(run, 1)
    return len(await b_open(pool, keys))


async def _outcomes(pool: asyncpg.Pool, batch: list[RunId]) -> int:
    done = Results()
    for run in batch:
        done.add(run, 1, SUCCEEDED, None, None)
    return len(await b_write_outcomes(pool, done, [now_ms()] * len(batch), OWNER))


# --- a round ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """Runs per statement of each side's phases."""

    claim: int
    across: bool  # today's claims packed across shards, as B's always are
    start: int
    result: int
    b_claim: int
    b_check: int  # 0: no open check
    b_outcome: int


async def _b_round(dsn: str, jobs: int, sizes: Sizes, setups: list[str]) -> list[Phase]:
    """B's phases on a new database (`setups`, the last of them B's schema, run on it once
    migrated): register, lead every shard, then claim, check and write every run."""
    async with round_database(dsn, "statements_b", jobs, setups, [queries()["b_analyze"]]) as (
        _round_dsn,
        admin,
        leaders,
        workers,
    ):
        shards = await _lead_every_shard(leaders)
        runs: list[RunId] = []
        worker_pid = await workers.fetchval("SELECT pg_backend_pid()")
        claimed = partial(_b_claims, leaders, shards, sizes.b_claim, runs)
        steps: list[tuple[str, int, Callable[[], Any]]] = [
            ("B claim", leaders.get_server_pid(), claimed)
        ]
        if sizes.b_check:
            opened = partial(_in_batches, runs, sizes.b_check, partial(_open, workers), "open")
            steps.append(("B check", worker_pid, opened))
        written = partial(
            _in_batches, runs, sizes.b_outcome, partial(_outcomes, workers), "written"
        )
        steps.append(("B outcome", worker_pid, written))
        phases = [await _phase(name, jobs, pid, admin, body) for name, pid, body in steps]
        progress = await admin.fetchrow(queries()["b_progress"])
        assert progress is not None  # an aggregate has its row
        if progress["claimed"] != jobs or progress["completed"] != jobs:
            raise RuntimeError(f"the database holds {dict(progress)} for {jobs} jobs")
        return phases


# --- the correctness checks (--check) ---------------------------------------------------------


class Verdicts:
    def __init__(self) -> None:
        self.failed = 0

    def __call__(self, what: str, ok: bool, detail: object = "") -> None:
        if not ok:
            self.failed += 1
        print(f"{'ok    ' if ok else 'FAILED'} {what}{f': {detail}' if detail else ''}")


async def _claims_of(conn: asyncpg.Connection, entries: Sequence[JobEntry]) -> int:
    count: int = await conn.fetchval(queries()["b_claims_of"], TENANT, [e.job_id for e in entries])
    return count


async def _fenced(conn: asyncpg.Connection, lease: Lease, entries: list[JobEntry]) -> bool:
    try:
        await b_claim(
            conn, lease, PUBLISH_LEASE_MS, plan_claims(entries, entries[0].next_ms, ScheduleCache())
        )
    except FencedOut:
        return True
    return False


async def _plan(conn: asyncpg.Connection | asyncpg.Pool, name: str, params: Sequence[Any]) -> str:
    """The plan of B's statement `name` for these parameters (EXPLAIN: nothing runs)."""
    rows = await conn.fetch("EXPLAIN " + queries()[name], *params)
    return "\n".join(row[0] for row in rows)


async def _check(dsn: str, jobs: int, setups: list[str]) -> int:
    """B's statements on `jobs` jobs of a database of their own: how each guard holds. Prints
    a verdict per check; returns how many failed."""
    verdict = Verdicts()
    async with round_database(
        dsn, "statements_b_check", jobs, setups, [queries()["b_analyze"]]
    ) as (_round_dsn, admin, leaders, workers):
        led = [(lease, entries) for lease, entries in await _lead_every_shard(leaders) if entries]
        if len(led) < 4 or min(len(e) for _, e in led[:4]) < 8:
            raise SystemExit("--check needs more jobs: at least 8 in each of 4 shards")
        (lease_a, a), (lease_b, b), (lease_c, c) = led[0], led[1], led[2]
        q = queries()

        def planned(entries: list[JobEntry]) -> ClaimBatch:
            return plan_claims(entries, entries[0].next_ms, ScheduleCache())

        # The plan: one primary-key probe per run, at the batch size of the rounds.
        everything = [e for _, entries in led for e in entries]
        params = b_claim_params(
            [(lease_c, planned(everything))], [(lease_c.epoch, lease_c.owner)], 0
        )
        plan = await _plan(leaders, "b_claim", params)
        verdict(
            f"the claim of {len(everything):,} runs reads jobs by its primary key, no scan",
            "Index Scan using jobs_pkey on jobs" in plan and "Seq Scan on jobs" not in plan,
            "" if "Seq Scan on jobs" not in plan else plan,
        )

        # I2: a leader whose epoch or owner the shard's row no longer holds claims nothing.
        new_a = await leader_store.take_over(leaders, lease_a.shard, OWNER)
        verdict("a claim with a stale epoch is fenced out", await _fenced(leaders, lease_a, a))
        verdict("… and inserts nothing", await _claims_of(leaders, a) == 0)
        stranger = Lease(new_a.shard, new_a.epoch, "someone-else")
        verdict("a claim with another owner is fenced out", await _fenced(leaders, stranger, a))
        verdict("… and inserts nothing", await _claims_of(leaders, a) == 0)

        # I3: a job edited (new version) or not active any more is not claimed.
        edited, paused, rest = b[:3], b[3:5], b[5:]
        await admin.execute(q["b_check_bump_version"], TENANT, [e.job_id for e in edited])
        await admin.execute(q["b_check_set_status"], TENANT, [e.job_id for e in paused], "paused")
        runs_b = await b_claim(leaders, lease_b, PUBLISH_LEASE_MS, planned(b))
        verdict(
            "a claim inserts only the jobs still at the wheel's version and active",
            {(r.tenant, r.job_id) for r in runs_b} == {e.ids for e in rest},
            f"{len(runs_b)} inserted, {len(rest)} expected",
        )
        verdict("… nothing for the edited jobs", await _claims_of(leaders, edited) == 0)
        verdict("… nothing for the paused jobs", await _claims_of(leaders, paused) == 0)

        # One statement for two leaders, one of them stale: only the stale one is fenced.
        lease_d, d = led[3]
        stale, fresh = await b_claim_many(
            leaders, PUBLISH_LEASE_MS, [(lease_a, planned(a)), (lease_d, planned(d))]
        )
        verdict(
            "in a claim of two leaders, the stale one is fenced out, the other's stands",
            isinstance(stale, FencedOut) and not isinstance(fresh, FencedOut)
            and len(fresh) == len(d) and await _claims_of(leaders, a) == 0,
            f"{stale!r}, {fresh if isinstance(fresh, FencedOut) else len(fresh)}",
        )  # fmt: skip
        created: list[RunId] = [(r.tenant, r.job_id, r.scheduled_ms) for r in runs_b]
        if not isinstance(fresh, FencedOut):
            created += [(r.tenant, r.job_id, r.scheduled_ms) for r in fresh]

        # Every other shard, A under its new lease: every run inserted.
        for lease, entries in [(new_a, a), *led[2:3], *led[4:]]:
            runs = await b_claim(leaders, lease, PUBLISH_LEASE_MS, planned(entries))
            created += [(r.tenant, r.job_id, r.scheduled_ms) for r in runs]
        expected = len(everything) - len(edited) - len(paused)
        verdict(
            "every other due run is claimed once",
            len(created) == len(set(created)) == expected,
            f"{len(created)} of {expected}",
        )

        # The run key: a repeated claim of the same instant inserts nothing.
        again = await b_claim(leaders, lease_c, PUBLISH_LEASE_MS, planned(c))
        verdict("a repeated claim of the same instant inserts nothing", again == [], len(again))
        progress = await admin.fetchrow(q["b_progress"])
        assert progress is not None
        verdict(
            "… and the claims are still one per run",
            progress["claimed"] == expected,
            dict(progress),
        )

        # The worker's open check (I4), with the workers' session settings.
        def keys_of(runs: Sequence[RunId], attempt: int) -> Keys:
            keys = Keys()
            for run in runs:
                keys.add(run, attempt)
            return keys

        plan = await _plan(
            workers, "b_open_runs", [db.id_list([TENANT]), db.id_list(["x"]), "0", "1"]
        )
        verdict(
            "the open check probes keys only, no scan",
            "Seq Scan" not in plan,
            plan if "Seq Scan" in plan else "",
        )
        opened = await b_open(workers, keys_of(created, 1))
        verdict("every claimed run is open at attempt 1", len(opened) == len(created), len(opened))
        verdict("none is open at attempt 2", await b_open(workers, keys_of(created, 2)) == [])
        unclaimed = [(TENANT, e.job_id, e.next_ms) for e in edited]
        verdict(
            "a run never claimed is not open",
            await b_open(workers, keys_of(unclaimed, 1)) == [],
        )

        # A retry chain on one run: attempt 1 fails, 2 is open, 2 succeeds, 1's late
        # success is refused by the key.
        chain, others = created[0], created[1:]
        failed = Results()
        failed.add(chain, 1, RETRYING, 10_000, "boom")
        written = await b_write_outcomes(workers, failed, [now_ms()], OWNER)
        verdict("attempt 1's failure is written", written == {chain})
        verdict("… attempt 1 is no longer open", await b_open(workers, keys_of([chain], 1)) == [])
        verdict("… attempt 2 is open", len(await b_open(workers, keys_of([chain], 2))) == 1)
        ok2 = Results()
        ok2.add(chain, 2, SUCCEEDED, None, None)
        verdict(
            "attempt 2's success is written",
            await b_write_outcomes(workers, ok2, [now_ms()], OWNER) == {chain},
        )
        late = Results()
        late.add(chain, 1, SUCCEEDED, None, None)
        verdict(
            "attempt 1's late success is refused by the key",
            await b_write_outcomes(workers, late, [now_ms()], OWNER) == set(),
        )

        # I5's one write: every result once; the same results again write nothing.
        done = Results()
        for run in others:
            done.add(run, 1, SUCCEEDED, None, None)
        started = [now_ms()] * len(others)
        first = await b_write_outcomes(workers, done, started, OWNER)
        verdict("every result is written", first == set(others), f"{len(first)} of {len(others)}")
        second = await b_write_outcomes(workers, done, started, OWNER)
        verdict(
            "the same results again write nothing (a second success by key)",
            second == set(),
            len(second),
        )
        verdict(
            "no run is open once its result is written",
            await b_open(workers, keys_of(created, 1)) == [],
        )
        progress = await admin.fetchrow(q["b_progress"])
        assert progress is not None
        verdict(
            "one claim and one success per run",
            progress["claimed"] == progress["completed"] == expected,
            dict(progress),
        )
    return verdict.failed


# --- the invocation ---------------------------------------------------------------------------


def _totals(rounds: list[tuple[str, list[Phase]]]) -> str:
    """Per round and side, the phases' Postgres CPU summed: what a run costs Postgres."""
    lines = [
        "| round | side | phases | Postgres CPU µs/run | Python CPU µs/run | "
        "WAL B/run (statements) |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for i, (label, phases) in enumerate(rounds, 1):
        groups = (
            [("claim (+ start) + result", ["claim", "start", "result"]),
             ("floor claim + result", ["floor claim", "floor result"])]
            if label == "today"
            else [("B claim + check + outcome", ["B claim", "B check", "B outcome"]),
                  ("B claim + outcome", ["B claim", "B outcome"])]
        )  # fmt: skip
        for name, members in groups:
            chosen = [p for p in phases if p.name in members]
            if not chosen:
                continue
            wal = [p.statement_wal_bytes_per_run for p in chosen]
            lines.append(
                f"| {(i + 1) // 2} | {label} | {name} | "
                f"{sum(p.postgres_cpu_us_per_run for p in chosen):.1f} | "
                f"{sum(p.python_cpu_us_per_run for p in chosen):.1f} | "
                f"{'—' if None in wal else round(sum(w or 0 for w in wal))} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1, help="pairs of rounds (today, B)")
    parser.add_argument("--claim", type=int, default=344, help="jobs per today's leader claim")
    parser.add_argument(
        "--claim-across-shards",
        action="store_true",
        help="today's claims of exactly --claim jobs, several shards' in one, as B's are",
    )
    parser.add_argument(
        "--start", type=int, default=0, help="runs per today's worker claim (0: none, D-268)"
    )
    parser.add_argument("--result", type=int, default=256, help="runs per today's result write")
    parser.add_argument("--unsealed", action="store_true", help="today's start as unsealed")
    parser.add_argument("--b-claim", type=int, default=B_CLAIM, help="runs per B claim")
    parser.add_argument(
        "--b-check", type=int, default=B_CHECK, help="deliveries per B open check (0: none)"
    )
    parser.add_argument("--b-outcome", type=int, default=B_OUTCOME, help="results per B write")
    parser.add_argument(
        "--b-schema",
        type=str,
        default=None,
        metavar="FILE",
        help="B's tables (default: run_path_b_schema.sql beside this file)",
    )
    parser.add_argument("--setup", type=str, default=None, metavar="FILE",
                        help="SQL run on every round's database first (both sides)")  # fmt: skip
    parser.add_argument("--check", action="store_true", help="B's correctness checks first")
    parser.add_argument("--check-jobs", type=int, default=CHECK_JOBS)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    dsn = load_settings().effective_dsn
    schema = default_schema()
    if args.b_schema is not None:
        with open(args.b_schema) as f:
            schema = f.read()
    shared: list[str] = []
    if args.setup is not None:
        with open(args.setup) as f:
            shared.append(f.read())
    if args.check:
        failed = asyncio.run(_check(dsn, args.check_jobs, [*shared, schema]))
        if failed:
            print(f"{failed} check(s) failed", file=sys.stderr)
            sys.exit(1)
    sizes = Sizes(
        args.claim,
        args.claim_across_shards,
        args.start,
        args.result,
        args.b_claim,
        args.b_check,
        args.b_outcome,
    )
    rounds: list[tuple[str, list[Phase]]] = []
    for i in range(args.rounds):
        # ABBA, so that a drift of the host, or an order effect, hits both sides alike.
        for side in ("today", "B") if i % 2 == 0 else ("B", "today"):
            if side == "today":
                phases = asyncio.run(
                    _round(dsn, args.jobs, sizes.claim, sizes.start, sizes.result, shared,
                           not args.unsealed, sizes.across)
                )  # fmt: skip
            else:
                phases = asyncio.run(_b_round(dsn, args.jobs, sizes, [*shared, schema]))
            rounds.append((side, phases))
    if not rounds:
        return
    print(_table(rounds))
    print()
    print(_totals(rounds))
    if args.json:
        report: dict[str, Any] = {
            "jobs": args.jobs,
            "batches": asdict(sizes),
            "start_claim": "unsealed" if args.unsealed else "sealed",
            "b_schema": args.b_schema or "bench/components/run_path_b_schema.sql",
            "setup": args.setup,
            "rounds": [
                {"label": label, "phases": [asdict(p) for p in phases]} for label, phases in rounds
            ],
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
