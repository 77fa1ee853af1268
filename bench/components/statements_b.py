"""Design B's hot statements beside today's, alternating round by round on fresh databases.

Design B (docs/journal/run-path.md, *Design B*; DESIGN §3 I3, I4 as rewritten) writes a run
twice, both times an INSERT into a narrow table: the leader's claim inserts the run's row into
`run_claims` after a key read of the job (no write of the job's row, no lock), and the worker,
after running the delivery, inserts its result into `run_outcomes`. The candidate schema is
`run_path_b_schema.sql`, the statements are the named blocks of `run_path_b.sql`, both beside
this file, called through `run_path_b.py`. One invocation measures, alternating round by round
(ABBA: today first in odd rounds, B first in even ones), each side on a new scratch database of
the dev stack with N one-off jobs due at one instant:

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
                        session 11 (docs/journal/hot-second.md, *Hot second, session 11*);
                        `--claim 5000 --claim-across-shards` gives today's claim B's statement
                        size, to tell the batch's gain from the schema's
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

`--check` first runs the correctness checks of B's statements (`run_path_b_guards.py`) on a
small database of its own (stale epoch, stale owner, a job's version or status changed, a
repeated claim, repeated and late results, the open check, the plans) and stops with exit
status 1 if one fails; `--rounds 0 --check` runs only those.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import asyncpg

from tickwheel.bench.components.run_path_b import (
    b_claim_many,
    b_open,
    b_write_outcomes,
    default_schema,
    queries,
)
from tickwheel.bench.components.run_path_b_guards import check
from tickwheel.bench.components.statements import (
    OWNER,
    PUBLISH_LEASE_MS,
    Phase,
    _in_batches,
    _lead_every_shard,
    _phase,
    _round,
    _table,
    packed,
    round_database,
)
from tickwheel.clock import now_ms
from tickwheel.config import load_settings
from tickwheel.domain import RunStatus
from tickwheel.schedule import ScheduleCache
from tickwheel.shards.plan import JobEntry, plan_claims
from tickwheel.shards.store import FencedOut, Lease
from tickwheel.workers.store import Keys, Results, RunId

B_CLAIM = 5000  # runs per B claim statement: no dispatch window (run-path.md §3.4)
B_CHECK = 500  # deliveries per open check: a consumed batch, as the floor's consumers take
B_OUTCOME = 500  # results per outcome statement
CHECK_JOBS = 2000  # jobs of the --check database
SUCCEEDED = RunStatus.SUCCEEDED.value


# --- the phases: the leader's claim, the worker's read and write (run_path_b.py) --------------


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
        failed = asyncio.run(check(dsn, args.check_jobs, [*shared, schema]))
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
