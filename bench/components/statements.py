"""The statements every run pays for, one at a time: what Postgres spends on each.

A hot second mixes the leaders' claims and the workers' result writes (and, for suspect
deliveries, their claims) on two
busy cores, so `pg_stat_statements` there counts time spent waiting for a core too. This
harness runs them apart, through the code that runs them in production, on N one-off jobs
due at one instant in a scratch database of the dev stack:

    claim      the leader's claim (`shards/store.py` `claim`, fenced by itself, planned by
               `plan_claims`), one shard after another, `--claim` jobs per statement (344:
               what a claim took in a hot second under the dispatch window,
               docs/journal/hot-second.md, *Hot second, session 10*;
               `--claim-across-shards`: exactly `--claim` per statement, several shards'
               in one, through `claim_many` as the claim combiner sends them)
    start      with `--start N`: the worker's claim (`RunStore.claim`, the workers' session
               settings), N runs per statement, which only suspect deliveries take (D-268;
               without it, the default, a run's one worker write is its result), as for the
               sealed envelopes leaders publish (`worker_claim_sealed`: no job row read;
               `--unsealed`: `worker_claim`, as for anyone else's)
    result     the worker's result write (`RunStore.write_results`), `--result` per statement
    positions  where the claimed jobs stand, written after the burst (`jobs_positions`, as
               shards/positions.py writes them: 5,000 per statement; a one-off completed):
               not on a run's path, but each claimed job's deferred cost (D-269)
    floor …    the floor's claim and result statements (bench/floor.py: 5,000 jobs per claim,
               500 results per write) on the same jobs in its own tables of the same database:
               the least the design needs, measured beside

For each phase, per run: the CPU of the session's Postgres server process (read from /proc:
run it on the database's host), this process's CPU (the Python that plans, encodes and decodes
the batches), the wall time and the WAL written — the server's (every database's writes and
autovacuum's too) and the phase's statements' own (pg_stat_statements in the round's database:
what the phase wrote while anything else runs on the server). `--rounds` repeats the
whole on a new database; figures of one invocation compare, figures of two sessions are
context. Nothing is asserted; every phase checks that it wrote every run. A variant is
measured beside the current code, alternating round by round: `--variant NAME=FILE` runs the
named statement of tickwheel/sql/*.sql as FILE has it, `--variant-setup FILE` runs FILE's SQL
on the variant's database once it is migrated (a schema candidate: an index dropped, a
storage setting), and `--setup FILE` runs FILE's SQL on every round's database first (a state
both sides share: a month of day partitions, as a deployment keeping 30 days of runs holds).

    .venv/bin/python -m tickwheel.bench.components.statements [--jobs 100000] [--rounds 3] \
        [--variant claim_due=/tmp/claim.sql] [--variant-setup /tmp/schema.sql] \
        [--setup /tmp/month.sql] \
        [--json docs/results/statements.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import asyncpg

from tickwheel import db, queries
from tickwheel.bench.floor import CLAIM_BATCH as FLOOR_CLAIM_BATCH
from tickwheel.bench.floor import RESULT_BATCH as FLOOR_RESULT_BATCH
from tickwheel.bench.floor import floor_connection
from tickwheel.bench.load import Handler, documents, due_instants, job_id, register_bulk_into
from tickwheel.bench.scratch import TENANT
from tickwheel.bench.supervisor import cpu_seconds
from tickwheel.clock import ms_to_datetime, now_ms
from tickwheel.config import load_settings
from tickwheel.domain import RunStatus
from tickwheel.queries import QUERIES
from tickwheel.schedule import ScheduleCache
from tickwheel.shards import store as leader_store
from tickwheel.shards.plan import JobEntry, plan_claims
from tickwheel.shards.positions import BATCH as POSITIONS_BATCH
from tickwheel.shards.positions import write_positions
from tickwheel.shards.store import FencedOut, Lease
from tickwheel.testing import migrate, scratch_database_async
from tickwheel.workers.store import Keys, Results, RunId, RunStore

SHARDS = 64
LEAD_MS = 3_600_000  # the jobs are due an hour ahead: nothing else would claim them
PUBLISH_LEASE_MS = 300_000
WORKER_LEASE_MS = 60_000
OWNER = "statements-bench"  # the leader's owner and the worker's id


@dataclass
class Phase:
    name: str
    runs: int
    calls: int
    postgres_cpu_us_per_run: float
    python_cpu_us_per_run: float  # this process: planning, encoding, decoding the batches
    wall_us_per_run: float
    wal_bytes_per_run: float  # the server's: every database's writes during the phase
    # The phase's statements' own (pg_stat_statements of the round's database); None without it.
    statement_wal_bytes_per_run: float | None = None


async def _wal(pool: asyncpg.Pool) -> int:
    """The server's WAL position in bytes (every session's writes, autovacuum's too)."""
    return int(await pool.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


async def statement_stats(conn: asyncpg.Connection | asyncpg.Pool) -> None:
    """pg_stat_statements in the round's database, if the server has it (else the statements'
    WAL is not reported)."""
    with contextlib.suppress(asyncpg.PostgresError):
        await conn.execute(QUERIES["bench_statement_stats"])


async def _statement_wal(pool: asyncpg.Pool) -> int | None:
    """The WAL this database's statements wrote so far (None: no pg_stat_statements)."""
    try:
        return int(await pool.fetchval(QUERIES["bench_statement_wal"]))
    except asyncpg.PostgresError:
        return None


async def _phase(
    name: str,
    runs: int,
    pid: int,
    admin: asyncpg.Pool,
    body: Callable[[], Awaitable[int]],
) -> Phase:
    """Run `body` (it returns its statement count), measured on the server process `pid`."""
    statement_wal = await _statement_wal(admin)
    wal, cpu = await _wal(admin), cpu_seconds(pid)
    own, start = time.process_time(), time.perf_counter()
    calls = await body()
    wall, own = time.perf_counter() - start, time.process_time() - own
    used = cpu_seconds(pid) - cpu
    wal_after = await _wal(admin)
    statement_wal_after = await _statement_wal(admin)
    return Phase(
        name,
        runs,
        calls,
        round(used / runs * 1e6, 1),
        round(own / runs * 1e6, 1),
        round(wall / runs * 1e6, 1),
        round((wal_after - wal) / runs, 1),
        None
        if statement_wal is None or statement_wal_after is None
        else round((statement_wal_after - statement_wal) / runs, 1),
    )


async def _register(dsn: str, admin: asyncpg.Pool, jobs: int) -> None:
    """`jobs` one-off jobs due together an hour from now, through the registry's own writes."""
    docs = documents(due_instants(jobs, now_ms() + LEAD_MS, 0), Handler.parse("noop"))
    await register_bulk_into(dsn, SHARDS, docs, lambda _: None)
    await admin.execute("VACUUM ANALYZE jobs")
    await admin.execute("ANALYZE job_runs")


async def _lead_every_shard(conn: asyncpg.Connection) -> list[tuple[Lease, list[JobEntry]]]:
    """Every shard taken over and its horizon loaded, as a leader starts (not measured)."""
    until_ms = now_ms() + 2 * LEAD_MS
    shards = []
    for shard in range(SHARDS):
        lease = await leader_store.take_over(conn, shard, OWNER)
        loaded, _ = await leader_store.horizon(conn, shard, until_ms)
        shards.append((lease, [entry for entry, _ in loaded]))
    return shards


Statement = list[tuple[Lease, list[JobEntry]]]  # the leaders' due entries one claim carries


def packed(shards: list[tuple[Lease, list[JobEntry]]], size: int) -> list[Statement]:
    """The shards' due entries as claims of exactly `size` entries (the last one fewer), one
    shard after another: a claim carries the tail of one shard's entries and the head of the
    next's, as the claim combiner (shards/claims.py) carries several leaders' claims in one
    statement. (One shard per statement, a claim is never larger than a shard's share: ~1,560
    of 100,000 jobs on 64 shards.)"""
    statements: list[Statement] = []
    current: Statement = []
    room = size
    for lease, entries in shards:
        start = 0
        while start < len(entries):
            chunk = entries[start : start + room]
            current.append((lease, chunk))
            start += len(chunk)
            room -= len(chunk)
            if room == 0:
                statements.append(current)
                current, room = [], size
    if current:
        statements.append(current)
    return statements


async def _leader_claims(
    conn: asyncpg.Connection,
    shards: list[tuple[Lease, list[JobEntry]]],
    claim: int,
    created: list[RunId],
    across: bool = False,
) -> int:
    """Every shard's jobs claimed through the leader's own path, `claim` per statement (one
    shard's at a time, or, `across`, `packed` across shards through `claim_many`); the runs
    created go to `created`. Returns the number of claims."""
    cache = ScheduleCache()
    calls = 0
    if across:
        for statement in packed(shards, claim):
            # Planned at the jobs' instant: each one-off runs once, nothing misfires.
            batches = [
                (lease, plan_claims(chunk, chunk[0].next_ms, cache)) for lease, chunk in statement
            ]
            outcomes = await leader_store.claim_many(conn, PUBLISH_LEASE_MS, batches)
            calls += 1
            for (lease, chunk), outcome in zip(statement, outcomes, strict=True):
                if isinstance(outcome, FencedOut) or len(outcome.runs) != len(chunk):
                    raise RuntimeError(f"shard {lease.shard}: {outcome} for {len(chunk)} jobs")
                created.extend((r.tenant, r.job_id, r.scheduled_ms) for r in outcome.runs)
        return calls
    for lease, entries in shards:
        for start in range(0, len(entries), claim):
            chunk = entries[start : start + claim]
            # Planned at the jobs' instant: each one-off runs once, nothing misfires.
            batch = plan_claims(chunk, chunk[0].next_ms, cache)
            claimed = await leader_store.claim(conn, lease, PUBLISH_LEASE_MS, batch)
            calls += 1
            if len(claimed.runs) != len(chunk):
                raise RuntimeError(
                    f"shard {lease.shard}: {len(claimed.runs)} of {len(chunk)} claimed"
                )
            created.extend((r.tenant, r.job_id, r.scheduled_ms) for r in claimed.runs)
    return calls


async def _positions(conn: asyncpg.Connection, shards: list[tuple[Lease, list[JobEntry]]]) -> int:
    """Every claimed one-off completed, as the leaders' positions writer does after a burst
    (`jobs_positions`, POSITIONS_BATCH per statement). Returns the number of statements."""
    entries = [entry for _, loaded in shards for entry in loaded]
    calls = 0
    for i in range(0, len(entries), POSITIONS_BATCH):
        part = entries[i : i + POSITIONS_BATCH]
        status = await write_positions(conn, [(e.tenant, e.job_id, e.version, None) for e in part])
        calls += 1
        if int(status.rsplit(" ", 1)[-1]) != len(part):
            raise RuntimeError(f"{status} of {len(part)} positions written")
    return calls


async def _in_batches(
    runs: list[RunId], size: int, write: Callable[[list[RunId]], Awaitable[int]], what: str
) -> int:
    """`write` the runs `size` at a time; it returns how many it wrote, which must be all.
    Returns the number of statements."""
    calls = 0
    for i in range(0, len(runs), size):
        batch = runs[i : i + size]
        written = await write(batch)
        calls += 1
        if written != len(batch):
            raise RuntimeError(f"{written} of {len(batch)} runs {what}")
    return calls


async def _start(store: RunStore, sealed: bool, batch: list[RunId]) -> int:
    keys = Keys()
    for run in batch:
        keys.add(run, 1)
    return len(await store.claim(keys, sealed))


async def _succeed(store: RunStore, batch: list[RunId]) -> int:
    done = Results()
    for run in batch:
        done.add(run, 1, RunStatus.SUCCEEDED.value, None, None)
    return len(await store.write_results(done))


async def _floor_claims(conn: asyncpg.Connection, created: list[tuple[str, int]]) -> int:
    calls = 0
    while rows := await conn.fetch(QUERIES["floor_claim"], FLOOR_CLAIM_BATCH):
        calls += 1
        created.extend((r["job_id"], r["scheduled_ms"]) for r in rows)
    return calls


async def _floor_results(conn: asyncpg.Connection, runs: list[tuple[str, int]]) -> int:
    calls = 0
    for i in range(0, len(runs), FLOOR_RESULT_BATCH):
        batch = runs[i : i + FLOOR_RESULT_BATCH]
        status = await conn.execute(
            QUERIES["floor_results"], [r[0] for r in batch], [r[1] for r in batch]
        )
        calls += 1
        if status != f"UPDATE {len(batch)}":
            raise RuntimeError(f"floor results: {status} for {len(batch)}")
    return calls


async def _floor(dsn: str, jobs: int, admin: asyncpg.Pool) -> list[Phase]:
    """The floor's two statements on `jobs` jobs due now, in its own tables, in the floor's own
    session (key lookups only)."""
    conn = await floor_connection(dsn)
    try:
        await conn.execute(QUERIES["floor_schema"])
        await conn.execute(
            QUERIES["floor_jobs_load"],
            [job_id(i) for i in range(jobs)],
            ms_to_datetime(now_ms() - 1000),  # whole ms: the result matches the claim's ms
        )
        await conn.execute(QUERIES["floor_analyze"])
        runs: list[tuple[str, int]] = []
        pid = conn.get_server_pid()
        phases = [
            await _phase("floor claim", jobs, pid, admin, partial(_floor_claims, conn, runs)),
            await _phase("floor result", jobs, pid, admin, partial(_floor_results, conn, runs)),
        ]
        if len(runs) != jobs:
            raise RuntimeError(f"the floor claimed {len(runs)} of {jobs}")
        return phases
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def round_database(
    dsn: str, name: str, jobs: int, setups: Sequence[str], after_register: Sequence[str] = ()
) -> AsyncIterator[tuple[str, asyncpg.Pool, asyncpg.Connection, asyncpg.Pool]]:
    """A round's scratch database `<name>_<random>` on the server of `dsn`: migrated,
    pg_stat_statements on, `setups` run in turn, the bench tenant's `jobs` one-offs registered
    and `after_register` run; yields (its DSN, an admin pool, the leaders' session, the
    workers' one session with the workers' own settings), all closed and the database dropped
    after."""
    async with scratch_database_async(dsn, name) as database:
        await migrate(database.dsn)
        conn = await asyncpg.connect(database.dsn)
        try:
            await statement_stats(conn)
            for setup in setups:
                await conn.execute(setup)
        finally:
            await conn.close()
        admin = await db.create_pool(database.dsn, min_size=1, max_size=2)
        leaders = await asyncpg.connect(database.dsn)
        # The workers' own session settings, one session so that one process does it all.
        workers = await db.create_pool(
            database.dsn,
            min_size=1,
            max_size=1,
            server_settings=db.KEYED_LOOKUPS,
            reset_sessions=False,
        )
        try:
            await admin.execute(QUERIES["bench_tenant"], TENANT)
            await _register(database.dsn, admin, jobs)
            for statement in after_register:
                await admin.execute(statement)
            yield database.dsn, admin, leaders, workers
        finally:
            await workers.close()
            await leaders.close()
            await admin.close()


async def _round(
    dsn: str,
    jobs: int,
    claim: int,
    start: int,
    result: int,
    setups: list[str],
    sealed: bool,
    across: bool = False,
) -> list[Phase]:
    """One database (`setups` run on it in turn once migrated): register, then the phases
    (`across`: the leader's claims packed across shards, `packed`)."""
    async with round_database(dsn, "statements", jobs, setups) as (
        dsn_of_round,
        admin,
        leaders,
        workers,
    ):
        shards = await _lead_every_shard(leaders)
        runs: list[RunId] = []
        worker_pid = await workers.fetchval("SELECT pg_backend_pid()")
        store = RunStore(workers, OWNER, WORKER_LEASE_MS)
        claimed = partial(_leader_claims, leaders, shards, claim, runs, across)
        started = partial(_in_batches, runs, start, partial(_start, store, sealed), "started")
        written = partial(_in_batches, runs, result, partial(_succeed, store), "written")
        steps = [
            ("claim", leaders.get_server_pid(), claimed),
            *([("start", worker_pid, started)] if start else []),
            ("result", worker_pid, written),
            ("positions", leaders.get_server_pid(), partial(_positions, leaders, shards)),
        ]
        phases = [await _phase(name, jobs, pid, admin, body) for name, pid, body in steps]
        progress = await admin.fetchrow(QUERIES["bench_progress"])
        assert progress is not None  # an aggregate has its row
        if progress["claimed"] != jobs or progress["completed"] != jobs:
            raise RuntimeError(f"the database holds {dict(progress)} for {jobs} jobs")
        return phases + await _floor(dsn_of_round, jobs, admin)


def _table(rounds: list[tuple[str, list[Phase]]]) -> str:
    lines = [
        "| round | statements as | phase | runs | statements | Postgres CPU µs/run | "
        "Python CPU µs/run | wall µs/run | WAL B/run (server) | WAL B/run (statements) |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, (label, phases) in enumerate(rounds, 1):
        for p in phases:
            own = p.statement_wal_bytes_per_run
            lines.append(
                f"| {i} | {label} | {p.name} | {p.runs:,} | {p.calls:,} | "
                f"{p.postgres_cpu_us_per_run} | {p.python_cpu_us_per_run} | "
                f"{p.wall_us_per_run} | {p.wal_bytes_per_run:.0f} | "
                f"{'—' if own is None else round(own)} |"
            )
    return "\n".join(lines)


def _variants(specs: list[str]) -> dict[str, str]:
    """`NAME=FILE` pairs as {statement name: its text}; the name must be a known statement."""
    texts = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or name not in QUERIES:
            raise SystemExit(f"--variant {spec!r}: expected NAME=FILE with a statement NAME")
        with open(path) as f:
            texts[name] = f.read()
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--claim", type=int, default=344, help="jobs per leader claim")
    parser.add_argument(
        "--claim-across-shards",
        action="store_true",
        help="claims of exactly --claim jobs, several shards' in one statement (claim_many)",
    )
    parser.add_argument(
        "--start",
        type=int,
        default=0,
        help="runs per worker claim (0, the default: none, as for a first delivery, D-268)",
    )
    parser.add_argument("--result", type=int, default=256, help="runs per result write")
    parser.add_argument(
        "--unsealed",
        action="store_true",
        help="start as for unsealed envelopes (the claim reads the job's row)",
    )
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FILE")
    parser.add_argument("--variant-setup", type=str, default=None, metavar="FILE")
    parser.add_argument("--setup", type=str, default=None, metavar="FILE")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    dsn = load_settings().effective_dsn
    variants = _variants(args.variant)
    # The statements by name as every caller reads them (`QUERIES` looks names up here).
    statements = queries.load()
    current = {name: statements[name] for name in variants}
    setup = None
    if args.variant_setup is not None:
        with open(args.variant_setup) as f:
            setup = f.read()
    shared: list[str] = []
    if args.setup is not None:
        with open(args.setup) as f:
            shared.append(f.read())
    labels = ["current", "variant"] if variants or setup is not None else ["current"]
    rounds: list[tuple[str, list[Phase]]] = []
    for _ in range(args.rounds):
        for label in labels:  # alternating, so that a drift of the host hits both alike
            statements.update(variants if label == "variant" else current)
            phases = asyncio.run(
                _round(
                    dsn,
                    args.jobs,
                    args.claim,
                    args.start,
                    args.result,
                    shared + ([setup] if label == "variant" and setup is not None else []),
                    not args.unsealed,
                    args.claim_across_shards,
                )
            )
            rounds.append((label, phases))
    statements.update(current)
    print(_table(rounds))
    if args.json:
        report: dict[str, Any] = {
            "jobs": args.jobs,
            "batches": {"claim": args.claim, "start": args.start, "result": args.result},
            "claim_across_shards": args.claim_across_shards,
            "start_claim": "unsealed" if args.unsealed else "sealed",
            "variants": args.variant,
            "variant_setup": args.variant_setup,
            "setup": args.setup,
            "rounds": [
                {"label": label, "phases": [asdict(p) for p in phases]} for label, phases in rounds
            ],
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
