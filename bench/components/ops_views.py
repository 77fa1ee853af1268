"""The operators' page on a large ledger: how long each of its reads takes.

Issue 51 asks every view of the operators' page (and the `jobs`/`runs`/`dlq` reads behind it)
to answer within 200 ms on 1,000,000 jobs and 10,000,000 runs. This harness builds such a
database in the dev stack's Postgres and times each read through the production function
that serves it (registry_api/ops/: `jobs_page`, `get_job`, `list_runs`, `get_run`,
`replays_of`, `replay_audit`, `OpsStore.run_rates|dead_runs|shard_leaders`,
`RegistryStore.tenants`, and views.py's `job_detail` and `run_detail`), never a copy of their
SQL.

The database (a scratch one `ops_views_<hex>`, or `--keep NAME`) is migrated, then seeded by
ops_views_seed.py, whose docstring has the mix: 20 tenants, `--jobs` jobs, `--runs` runs over
the 30 days before the seeding instant T, replay audits, the operators' actions. Seeding
10,000,000 runs takes minutes: `--keep NAME` keeps the database under that name, `--reuse NAME`
measures it again without seeding (applying any migration added since). The views that take an
instant get T (the throughput window ends at T, dead runs since T - 24 h), so a reused database
is measured as it was seeded; `ops_shards_behind` reads `now()`, so jobs whose next run passed
since T count as behind (the JSON says how long ago T was).

Each view runs on new connections of its own (a pool as the registry makes, for the functions
that take one; a connection as the commands open, for the others): the first call (statement
preparation included), then `--repeat` more (median and max), wall time around the awaited
call. The target is met when the slowest repetition is within `--target-ms`. For a view whose
first call or slowest repetition is over it (or every view, `--explain`), each statement it
sent is EXPLAIN (ANALYZE, BUFFERS)ed twice, as a custom and as a generic plan (what a pooled
connection may switch to after five executions), with the arguments it was given.

    .venv/bin/python -m tickwheel.bench.components.ops_views [--jobs 1000000] \
        [--runs 10000000] [--repeat 20] [--keep NAME | --reuse NAME] [--explain] \
        [--json docs/results/ops_views_1m_jobs_10m_runs.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, cast

import asyncpg

from tickwheel import db, queries
from tickwheel.bench.components.ops_views_seed import (
    DAY_MS,
    LEDGER_DAYS,
    Seed,
    seed,
    seeded,
    tenant_sizes,
)
from tickwheel.clock import now_ms
from tickwheel.config import load_settings
from tickwheel.registry_api.ops.jobs import get_job, jobs_page
from tickwheel.registry_api.ops.runs import get_run, list_runs, replay_audit, replays_of
from tickwheel.registry_api.ops.store import OpsStore
from tickwheel.registry_api.ops.views import DeadFilter, dead_letters, job_detail, run_detail
from tickwheel.registry_api.store import RegistryStore
from tickwheel.testing import (
    admin,
    database_exists,
    migrate,
    scratch_database_async,
    with_database,
)

TARGET_MS = 200.0
HOUR_MS = 3_600_000
PAGE_LIMIT = 50  # the jobs view's and `runs ls`' default page
NAME_FORM = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


# --- the views -----------------------------------------------------------------------------------


class Target(NamedTuple):
    """What a view is called on: its pool (for the functions that take one) and a connection
    held from a second pool (for those that take a connection)."""

    pool: asyncpg.Pool
    conn: asyncpg.Connection


@dataclass(frozen=True)
class View:
    name: str
    reads: str  # the function and its arguments, for the table
    call: Callable[[Target], Awaitable[Any]]
    rows: Callable[[Any], int]  # what it answered, counted
    must_answer: bool = True  # the seed holds rows for it


@dataclass
class Figure:
    name: str
    reads: str
    rows: int = 0
    must_answer: bool = True
    first_ms: float | None = None
    median_ms: float | None = None
    max_ms: float | None = None
    met: bool | None = None  # the slowest repetition within the target
    error: str | None = None
    statements: list[dict[str, Any]] = field(default_factory=list)  # with --explain or a miss


def _items(page: dict[str, Any]) -> int:
    return len(page["items"])


def _runs_of(job: dict[str, Any] | None) -> int:
    return 0 if job is None else len(job["runs"])


def _replays_of(run: dict[str, Any] | None) -> int:
    return 0 if run is None else len(run["replays"])


def _busy_buckets(buckets: Sequence[Any]) -> int:
    return sum(1 for b in buckets if b.created or b.published or b.finished)


def _led(leaders: Sequence[Any]) -> int:
    return sum(1 for s in leaders if s.owner is not None)


@dataclass(frozen=True)
class Probes:
    """Keys the views are asked about that only the database knows."""

    deep_cursor: tuple[str, str]  # 70% into the large tenant's key range
    paused_job: str  # a paused job of the large tenant with a pause note if any


async def probes(dsn: str, s: Seed) -> Probes:
    conn = await asyncpg.connect(dsn)
    try:
        deep = await conn.fetchval(
            "SELECT job_id FROM jobs WHERE tenant = $1 ORDER BY job_id OFFSET $2 LIMIT 1",
            s.big_tenant,
            tenant_sizes(s.jobs)[0][1] * 7 // 10,
        )
        paused = await conn.fetchval(
            "SELECT job_id FROM jobs WHERE tenant = $1 AND status = 'paused'"
            " ORDER BY right(job_id, 1) IN ('0', '3', '6') DESC, job_id LIMIT 1",
            s.big_tenant,
        )
    finally:
        await conn.close()
    return Probes((s.big_tenant, deep), paused)


def page_views(s: Seed, p: Probes) -> list[View]:
    """The jobs view (`GET /v1/ops/jobs`), as routes_jobs.py calls it."""

    def page(after: tuple[str, str] | None = None, **filters: str) -> Callable[[Target], Any]:
        args: dict[str, Any] = {"tenant": None, "status": None, "handler": None, "text": None}
        args.update(filters)
        return lambda t: jobs_page(t.pool, after=after, limit=PAGE_LIMIT, **args)

    big = s.big_tenant
    return [
        View("jobs page", "jobs_page()", page(), _items),
        View("jobs page: tenant", f"jobs_page(tenant={big})", page(tenant=big), _items),
        View("jobs page: paused", "jobs_page(status=paused)", page(status="paused"), _items),
        View(
            "jobs page: handler",
            "jobs_page(handler=reports.daily)",
            page(handler="reports.daily"),
            _items,
        ),
        View("jobs page: q", "jobs_page(text=77)", page(text="77"), _items),
        View(
            "jobs page: tenant + rare q",
            f"jobs_page(tenant={big}, text=9999)",
            page(tenant=big, text="9999"),
            _items,
            must_answer=False,
        ),
        View(
            "jobs page: deep cursor",
            f"jobs_page(after={p.deep_cursor[1]}, tenant={big})",
            page(after=p.deep_cursor, tenant=big),
            _items,
        ),
    ]


def run_views(s: Seed, p: Probes) -> list[View]:
    """`jobs show`, `runs ls|show`, `dlq audit`: the jobs' and runs' reads by key."""
    big, hot, run = s.big_tenant, s.hot_job, s.replayed_run

    def runs(**filters: Any) -> Callable[[Target], Any]:
        return lambda t: list_runs(t.conn, limit=PAGE_LIMIT, **filters)

    since = s.seeded_at_ms - HOUR_MS
    return [
        View(
            "get_job: hot job",
            f"get_job({big}/{hot})",
            lambda t: get_job(t.conn, big, hot),
            _runs_of,
        ),
        View(
            "get_job: paused job",
            f"get_job({big}/{p.paused_job})",
            lambda t: get_job(t.conn, big, p.paused_job),
            _runs_of,
        ),
        View("list_runs", "list_runs()", runs(), len),
        View("list_runs: tenant", f"list_runs(tenant={big})", runs(tenant=big), len),
        View(
            "list_runs: small tenant",
            f"list_runs(tenant={s.small_tenant})",
            runs(tenant=s.small_tenant),
            len,
        ),
        View(
            "list_runs: job",
            f"list_runs(tenant={big}, job_id={hot})",
            runs(tenant=big, job_id=hot),
            len,
        ),
        View("list_runs: dead", "list_runs(status=dead)", runs(status="dead"), len),
        View("list_runs: last hour", "list_runs(since_ms=T - 1 h)", runs(since_ms=since), len),
        View("get_run", f"get_run({run})", lambda t: get_run(t.conn, run), _replays_of),
        View("replays_of", f"replays_of({run})", lambda t: replays_of(t.conn, run), len),
        View("replay_audit", "replay_audit(limit=50)", lambda t: replay_audit(t.conn, 50), len),
    ]


def status_views(s: Seed) -> list[View]:
    """The status page's polls (`/v1/ops/shards|throughput|dead|tenants`), as routes.py calls
    them, at the seeding instant T."""
    t = s.seeded_at_ms

    def ops(t_: Target) -> OpsStore:
        return OpsStore(t_.pool, s.shards)

    return [
        View(
            "run_rates: 10 min",
            "OpsStore.run_rates(T, 60)",
            lambda x: ops(x).run_rates(t, 60),
            _busy_buckets,
        ),
        View(
            "run_rates: 60 min",
            "OpsStore.run_rates(T, 360)",
            lambda x: ops(x).run_rates(t, 360),
            _busy_buckets,
        ),
        View(
            "dead_runs: 24 h",
            "OpsStore.dead_runs(T - 24 h, 20)",
            lambda x: ops(x).dead_runs(t - 24 * HOUR_MS, 20),
            len,
        ),
        View(
            "dead_runs: 30 days",
            "OpsStore.dead_runs(T - 30 d, 200)",
            lambda x: ops(x).dead_runs(t - LEDGER_DAYS * DAY_MS, 200),
            len,
        ),
        View("shard_leaders", "OpsStore.shard_leaders()", lambda x: ops(x).shard_leaders(), _led),
        View(
            "tenants",
            "RegistryStore.tenants()",
            lambda x: RegistryStore(x.pool, s.shards).tenants(),
            len,
        ),
    ]


def detail_views(s: Seed) -> list[View]:
    """The page's one job and one run (`GET /v1/ops/jobs/…`, `/v1/ops/runs/…`), as
    routes_views.py calls views.py for them: on a connection, at the instant T."""
    big, hot, run, t = s.big_tenant, s.hot_job, s.replayed_run, s.seeded_at_ms
    return [
        View(
            "job_detail: hot job",
            f"views.job_detail({big}/{hot})",
            lambda x: job_detail(x.conn, big, hot, shards=s.shards, now_ms=t),
            _runs_of,
        ),
        View(
            "run_detail",
            f"views.run_detail({run})",
            lambda x: run_detail(x.conn, run),
            _replays_of,
        ),
        *dead_letter_views(s),
    ]


def dead_letter_views(s: Seed) -> list[View]:
    """The page's dead letters (views.dead_letters: 50 and the count up to 10,000): a day, a
    month, a tenant's month, and an error text no dead run of a month holds."""
    t, big = s.seeded_at_ms, s.big_tenant
    cases = [
        ("24 h", DeadFilter(since_ms=t - DAY_MS), True),
        ("30 d", DeadFilter(since_ms=t - LEDGER_DAYS * DAY_MS), True),
        ("30 d, tenant", DeadFilter(since_ms=t - LEDGER_DAYS * DAY_MS, tenant=big), True),
        ("30 d, rare error", DeadFilter(since_ms=t - LEDGER_DAYS * DAY_MS, error="zq#"), False),
    ]
    return [
        View(
            f"dead_letters: {label}",
            f"views.dead_letters({flt.to_json()}, 50)",
            lambda x, flt=flt: dead_letters(x.conn, flt, PAGE_LIMIT),  # type: ignore[misc]
            lambda answer: len(answer[0]),  # (the letters, their count)
            must,
        )
        for label, flt, must in cases
    ]


# --- measuring -----------------------------------------------------------------------------------


@asynccontextmanager
async def target(dsn: str) -> AsyncIterator[Target]:
    """New connections for one view: a pool as the registry makes (the HTTP views'), and a
    connection as `with_db` opens (the commands')."""
    pool = await db.create_pool(dsn, min_size=1, max_size=1)
    try:
        conn = await db.connect(dsn)
        try:
            yield Target(pool, conn)
        finally:
            await conn.close()
    finally:
        await pool.close()


async def _ms(call: Awaitable[Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await call
    return (time.perf_counter() - start) * 1000, result


async def measure(dsn: str, view: View, repeat: int, target_ms: float) -> Figure:
    """The first call on new connections, then `repeat` more; an exception is the figure's
    error (a view under edit must not stop the others)."""
    figure = Figure(view.name, view.reads, must_answer=view.must_answer)
    async with target(dsn) as t:
        try:
            first, result = await _ms(view.call(t))
            times = [(await _ms(view.call(t)))[0] for _ in range(repeat)]
        except Exception as err:
            figure.error = f"{type(err).__name__}: {err}"
            return figure
    figure.rows = view.rows(result)
    figure.first_ms = round(first, 1)
    figure.median_ms = round(statistics.median(times), 1)
    figure.max_ms = round(max(times), 1)
    figure.met = figure.max_ms <= target_ms
    return figure


class Recorder:
    """Stands in for a pool or a connection: passes each statement on and keeps it with its
    arguments, so that EXPLAIN sees exactly what the production function sent."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.sent: list[tuple[str, tuple[Any, ...]]] = []

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        self.sent.append((sql, args))
        return await self.conn.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        self.sent.append((sql, args))
        return await self.conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        self.sent.append((sql, args))
        return await self.conn.fetchval(sql, *args)


def literal(value: Any) -> str:
    """A bound argument as an SQL literal, for EXECUTE (which takes no parameters)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


async def _plan(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...], mode: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of `sql` with `args` as a prepared statement's `mode` plan
    (force_custom_plan | force_generic_plan)."""
    types = [f"{p.schema}.{p.name}" for p in (await conn.prepare(sql)).get_parameters()]
    header = f"({', '.join(types)})" if types else ""
    await conn.execute(f"PREPARE ops_view_explain {header} AS {sql}")
    try:
        await conn.execute(f"SET plan_cache_mode = {mode}")
        values = f"({', '.join(literal(a) for a in args)})" if args else ""
        rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE ops_view_explain {values}")
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.execute("DEALLOCATE ops_view_explain")


async def explain(dsn: str, view: View) -> list[dict[str, Any]]:
    """Each statement the view sends, its text's first line, its arguments and both plans."""
    conn = await asyncpg.connect(dsn)
    try:
        recorder = Recorder(conn)
        fake = cast(Any, recorder)
        await view.call(Target(fake, fake))
        out = []
        for sql, args in recorder.sent:
            out.append(
                {
                    "statement": next(
                        (name for name, text in queries.load().items() if text == sql), sql[:80]
                    ),
                    "args": [literal(a) for a in args],
                    "custom_plan": await _plan(conn, sql, args, "force_custom_plan"),
                    "generic_plan": await _plan(conn, sql, args, "force_generic_plan"),
                }
            )
        return out
    finally:
        await conn.close()


# --- the database and the run --------------------------------------------------------------------


@asynccontextmanager
async def database(dsn: str, keep: str | None, reuse: str | None) -> AsyncIterator[str]:
    """The database to measure: `reuse` as it is (migrated to the current schema), `keep`
    created under that name and kept (dropped if seeding fails), else a scratch one dropped at
    the end. Names are checked against NAME_FORM before they reach SQL text."""
    for name in (keep, reuse):
        if name is not None and not NAME_FORM.match(name):
            raise SystemExit(f"{name!r}: a database name here matches {NAME_FORM.pattern}")
    if reuse is not None:
        if not await database_exists(dsn, reuse):
            raise SystemExit(f"no database {reuse!r} to reuse")
        await migrate(with_database(dsn, reuse), partitions=False)
        yield reuse
    elif keep is not None:
        if await database_exists(dsn, keep):
            raise SystemExit(f"database {keep!r} exists: --reuse it, or drop it first")
        await admin(dsn, f'CREATE DATABASE "{keep}"')
        try:
            yield keep
        except BaseException:
            await admin(dsn, f'DROP DATABASE IF EXISTS "{keep}" WITH (FORCE)')
            raise
    else:
        async with scratch_database_async(dsn, "ops_views") as scratch:
            yield scratch.name


@dataclass
class Report:
    command: str
    database: str
    kept: bool
    jobs: int
    runs: int
    seeded_now: bool
    seed_s: dict[str, float]
    seeded_at_ms: int
    measured_at_ms: int
    seeded_ago_s: float
    target_ms: float
    repeat: int
    server: str
    views: list[Figure]


async def run(args: argparse.Namespace, command: str) -> Report:
    settings = load_settings()
    base = settings.effective_dsn
    async with database(base, args.keep, args.reuse) as name:
        dsn = with_database(base, name)
        if args.reuse is None:
            await migrate(dsn)
            print(f"seeding {name}: {args.jobs:,} jobs, {args.runs:,} runs", file=sys.stderr)
            s = await seed(dsn, args.jobs, args.runs, settings.shards)
        else:
            s = await seeded(dsn)
        p = await probes(dsn, s)
        views = [*page_views(s, p), *run_views(s, p), *status_views(s), *detail_views(s)]
        figures = []
        for view in views:
            figure = await measure(dsn, view, args.repeat, args.target_ms)
            over = any((m or 0) > args.target_ms for m in (figure.first_ms, figure.max_ms))
            if figure.error is None and (args.explain or over):
                figure.statements = await explain(dsn, view)
            print(_row(figure), file=sys.stderr)
            figures.append(figure)
        conn = await asyncpg.connect(dsn)
        try:
            server = str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
    measured = now_ms()
    return Report(
        command=command,
        database=name,
        kept=args.keep is not None or args.reuse is not None,
        jobs=s.jobs,
        runs=s.runs,
        seeded_now=args.reuse is None,
        seed_s=s.seed_s,
        seeded_at_ms=s.seeded_at_ms,
        measured_at_ms=measured,
        seeded_ago_s=round((measured - s.seeded_at_ms) / 1000, 1),
        target_ms=args.target_ms,
        repeat=args.repeat,
        server=server,
        views=figures,
    )


def _row(f: Figure) -> str:
    if f.error is not None:
        return f"| {f.name} | `{f.reads}` | — | — | — | — | error: {f.error} |"
    verdict = "met" if f.met else "**missed**"
    return (
        f"| {f.name} | `{f.reads}` | {f.rows} | {f.first_ms} | {f.median_ms} | {f.max_ms} "
        f"| {verdict} |"
    )


def table(report: Report) -> str:
    lines = [
        f"| view | reads | rows | first ms | median ms | max ms | ≤ {report.target_ms:g} ms |",
        "|---|---|---:|---:|---:|---:|---|",
        *(_row(f) for f in report.views),
    ]
    return "\n".join(lines)


def _explains(report: Report) -> str:
    parts = []
    for f in report.views:
        for st in f.statements:
            parts.append(
                f"--- {f.name}: {st['statement']} ({', '.join(st['args'])})\n"
                f"custom plan:\n{st['custom_plan']}\ngeneric plan:\n{st['generic_plan']}"
            )
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=20, help="calls after the first")
    parser.add_argument("--target-ms", type=float, default=TARGET_MS)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--keep", metavar="NAME", help="seed into database NAME and keep it")
    where.add_argument("--reuse", metavar="NAME", help="measure database NAME, seeded before")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN every view's statements")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    if not 100 <= args.jobs <= 9_999_999 or args.repeat < 1:
        parser.error("--jobs must be within 100..9,999,999 and --repeat at least 1")
    report = asyncio.run(run(args, shlex.join(sys.orig_argv)))
    print(table(report))
    if any(f.statements for f in report.views):
        print("\n" + _explains(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(asdict(report), f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
