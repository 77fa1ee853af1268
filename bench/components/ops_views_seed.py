"""The ledger the operators' page harness (ops_views.py) measures, seeded in Postgres.

The database to seed is migrated first (ops_views.py does it), so its schema is the real one;
`job_runs`' day partitions are created here for the 30 days before the seeding instant T. It
is seeded with set-based SQL (INSERT … SELECT over generate_series):

    tenants  20: one large (`marketplace`, 90% of the jobs) and 19 small ones (10% together,
             the largest 1% of the jobs, the smallest 0.05%); an API key each, their job
             counters set as the registry keeps them
    jobs     `--jobs`: 65% active cron, 5% paused cron (a third with a pause note when the
             schema has `job_pause_notes`), 15% completed one-offs, 14% one-offs due in the
             next 30 days, 1% deleted; six handler names spread over the key order, 5% HTTP
             targets instead; 10% high or low priority. Each row holds what the registry
             writes for it (`document` as accepted, `version`, `next_run_at`, `shard_id` =
             `tickwheel.sharding.shard_of`, computed in Python: Postgres has no blake2b; the
             keys are copied in, every other column is derived in SQL)
    runs     `--runs` over the 30 days before T, as many every day, each day partition's heap
             in scheduled order: 40% belong to the large tenant's hot jobs (every 5 minutes,
             8,640 runs each at most), one to each completed one-off, the rest to the other
             cron jobs, n each (n or n + 1) spaced evenly over the 30 days (their schedule text
             says daily: no view compares the two). 96% succeeded (2% of those at a second
             attempt), 2% dead with an error text, 1% skipped; in the last hour 1.5% retrying,
             in the last two minutes 6% running; 1% triggers, 1% backfill runs
    replays  40 replay audits over 25 days, each recording up to 100 dead runs (replayed,
             skipped or refused), one dead run of a hot job named by 15 of them
    actions  an `ops_audit` row per paused job and 30 on the hot job; every shard led

then VACUUM (ANALYZE)d. What was seeded (T, the counts, the keys the views are asked about)
is kept in the database's comment, so that measuring it again (`--reuse`) needs nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Awaitable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import asyncpg

from tickwheel.clock import now_ms
from tickwheel.domain import run_key
from tickwheel.queries import QUERIES
from tickwheel.sharding import shard_of

MINUTE_MS = 60_000
DAY_MS = 86_400_000
LEDGER_DAYS = 30
HOT_PERIOD_MS = 5 * MINUTE_MS  # the hot jobs' `*/5 * * * *`
HOT_SHARE = 0.4  # of the runs, the large tenant's hot jobs'
BIG_TENANT = "marketplace"
SMALL_TENANTS = (
    "analytics", "billing", "crm", "devops", "edu", "fintech", "games", "health", "iot",
    "jobs-board", "kiosk", "logistics", "media", "news", "ops", "payments", "quiz",
    "research", "support",
)  # fmt: skip
# Job i's id begins with AREAS[i % 6] (Python writes the ids); its handler is
# HANDLERS[(i / 6) % 6] (SQL writes the rest), so that a handler's jobs are spread over the key
# order as in a real registry, not one block per id prefix.
AREAS = ("account", "order", "user", "store", "feed", "batch")
HANDLERS = (
    "billing.invoice",
    "reports.daily",
    "email.reminder",
    "crm.sync",
    "storage.cleanup",
    "notify.push",
)
ERRORS = (
    "TimeoutError: handler exceeded its timeout of 300000 ms",
    "HTTP 503 Service Unavailable from hooks.example.com",
    "ValueError: account has no billing address on file",
    "ConnectionRefusedError: [Errno 111] Connection refused",
)


@dataclass(frozen=True)
class Seed:
    """What a seeded database holds that the views are asked about, kept in its comment (so
    `--reuse` needs nothing else)."""

    seeded_at_ms: int  # T: the runs end here
    jobs: int
    runs: int
    shards: int
    big_tenant: str
    small_tenant: str
    hot_job: str  # a job of the large tenant with the most runs
    replayed_run: str  # a dead run that replays touched
    seed_s: dict[str, float] = field(default_factory=dict)  # phase → seconds


def tenant_sizes(jobs: int) -> list[tuple[str, int]]:
    """(tenant, jobs) with the large tenant first: small tenant k gets (19 - k) / 190 of 10%."""
    small = [(name, max(1, jobs * (19 - k) // 1900)) for k, name in enumerate(SMALL_TENANTS)]
    return [(BIG_TENANT, jobs - sum(n for _, n in small)), *small]


def job_id(i: int) -> str:
    return f"{AREAS[i % len(AREAS)]}-{i:07d}"


def job_keys(jobs: int, shards: int) -> Iterator[tuple[int, str, str, int]]:
    """(i, tenant, job id, shard) of every job, the large tenant's from i = 0."""
    i = 0
    for tenant, size in tenant_sizes(jobs):
        for _ in range(size):
            ident = job_id(i)
            yield i, tenant, ident, shard_of(tenant, ident, shards)
            i += 1


def hot_runs(runs: int) -> tuple[int, int, int]:
    """(hot jobs, runs each, how many of them get one more): HOT_SHARE of the runs, at most
    one every 5 minutes for 30 days each."""
    total = int(runs * HOT_SHARE)
    count = -(-total // (LEDGER_DAYS * DAY_MS // HOT_PERIOD_MS))
    return count, total // count, total % count


# A temp function, so that every instant below reads as the code's interval arithmetic does.
AT_MS = """
CREATE FUNCTION pg_temp.at_ms(ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$ SELECT 'epoch'::timestamptz + ms * interval '1 millisecond' $$
"""

KEYS_TABLE = "CREATE TEMP TABLE seed_keys (i bigint, tenant text, job_id text, shard_id integer)"

# Each job's role and runs. $1 T, $2 hot jobs, $3 runs each, $4 hot jobs with one more,
# $5 the runs left for the other cron jobs and completed one-offs.
PLAN = """
CREATE TEMP TABLE seed_plan AS
WITH roles AS (
    SELECT k.*,
           CASE WHEN k.i < $2 THEN 'hot'
                WHEN (k.i * 7919) % 1000 < 650 THEN 'cron'
                WHEN (k.i * 7919) % 1000 < 700 THEN 'paused'
                WHEN (k.i * 7919) % 1000 < 850 THEN 'done'
                WHEN (k.i * 7919) % 1000 < 990 THEN 'due'
                ELSE 'deleted' END AS role,
           (k.i * 104729) % 100 < 5 AS http,
           CASE (k.i * 31) % 20 WHEN 0 THEN 'high' WHEN 1 THEN 'low' ELSE 'normal' END
               AS priority,
           CASE WHEN (k.i * 31) % 20 < 4 THEN 3 ELSE 5 END AS max_attempts
    FROM seed_keys k
), ranked AS (
    SELECT r.*,
           row_number() OVER (PARTITION BY r.role IN ('cron', 'paused', 'deleted')
                              ORDER BY r.i) - 1 AS rank,
           count(*) FILTER (WHERE r.role IN ('cron', 'paused', 'deleted')) OVER () AS crons,
           count(*) FILTER (WHERE r.role = 'done') OVER () AS dones
    FROM roles r
), sized AS (
    SELECT r.*,
           CASE r.role
               WHEN 'hot' THEN $3::bigint + (r.i < $4)::int
               WHEN 'done' THEN 1
               WHEN 'due' THEN 0
               ELSE ($5::bigint - r.dones) / r.crons
                    + (r.rank < ($5::bigint - r.dones) % r.crons)::int
           END AS n_runs
    FROM ranked r
), spaced AS (
    -- n runs evenly over the 30 days, to the minute: the ledger's rate is the same every day
    SELECT r.*,
           CASE WHEN r.role = 'hot' THEN 300000
                WHEN r.n_runs > 0 THEN 30 * 86400000::bigint / r.n_runs / 60000 * 60000
                ELSE 86400000 END AS period_ms
    FROM sized r
)
SELECT s.i, s.tenant, s.job_id, s.shard_id, s.role, s.http, s.priority, s.max_attempts,
       s.n_runs, s.period_ms,
       CASE WHEN s.role = 'hot' THEN 0 ELSE (s.i * 483059) % (s.period_ms / 60000) * 60000 END
           AS phase_ms,
       CASE WHEN s.role = 'done'
            THEN $1::bigint - 60000 - (s.i * 102947) % ((30 - 1) * 86400000::bigint)
            WHEN s.role = 'due'
            THEN $1::bigint + 60000 + (s.i * 134623) % (30 * 86400000::bigint)
            WHEN s.role = 'hot' THEN $1::bigint / 300000 * 300000
            ELSE ($1::bigint - (s.i * 483059) % (s.period_ms / 60000) * 60000) / s.period_ms
                 * s.period_ms + (s.i * 483059) % (s.period_ms / 60000) * 60000
       END AS last_ms  -- a one-off's instant; else its last occurrence at or before T
FROM spaced s
"""

PLAN_CHECK = """
SELECT coalesce(sum(n_runs), 0) AS runs, min(n_runs) AS least,
       coalesce(max((n_runs - 1) * period_ms) FILTER (WHERE n_runs > 0), 0) AS span_ms
FROM seed_plan
"""

# The jobs as the registry writes them; $1 T, $2 handlers.
JOBS = """
INSERT INTO jobs (tenant, job_id, shard_id, kind, schedule, run_at, timezone, handler, target,
                  payload, priority, max_attempts, status, next_run_at, version, document,
                  created_at, updated_at)
SELECT p.tenant, p.job_id, p.shard_id, d.kind, d.schedule, pg_temp.at_ms(d.run_at_ms), 'UTC',
       d.handler, d.target, d.payload, p.priority, p.max_attempts, d.status,
       pg_temp.at_ms(d.next_ms), d.version,
       jsonb_build_object(
           'at', to_char(pg_temp.at_ms(d.run_at_ms) AT TIME ZONE 'UTC',
                         'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'id', p.job_id, 'dst', '{"gap": "shift", "overlap": "first"}'::jsonb,
           'target', d.target, 'backoff', '{"cap_ms": 600000, "base_ms": 10000}'::jsonb,
           'handler', d.handler,
           'misfire', '{"policy": "run_once", "grace_ms": 60000, "max_catchup": 10}'::jsonb,
           'overlap', 'allow', 'payload', d.payload, 'priority', p.priority,
           'schedule', d.schedule, 'timezone', 'UTC', 'timeout_ms', 300000,
           'max_attempts', p.max_attempts),
       pg_temp.at_ms(d.created_ms),
       pg_temp.at_ms(CASE WHEN d.version > 1 THEN (d.created_ms + $1::bigint) / 2
                          ELSE d.created_ms END)
FROM seed_plan p
CROSS JOIN LATERAL (
    SELECT CASE WHEN p.role IN ('done', 'due') THEN 'once' ELSE 'cron' END AS kind,
           CASE WHEN p.role IN ('done', 'due') THEN NULL
                WHEN p.role = 'hot' THEN '*/5 * * * *'
                ELSE format('%s %s * * *', p.phase_ms / 60000 % 60, p.phase_ms / 3600000 % 24)
           END AS schedule,
           CASE WHEN p.role IN ('done', 'due') THEN p.last_ms END AS run_at_ms,
           CASE WHEN p.http THEN NULL ELSE ($2::text[])[p.i / 6 % 6 + 1] END AS handler,
           CASE WHEN p.http THEN jsonb_build_object(
                    'url', 'https://hooks.example.com/' || p.tenant || '/' || p.i % 6,
                    'method', 'POST', 'headers', '{}'::jsonb) END AS target,
           jsonb_build_object('account', p.i % 5000) AS payload,
           CASE p.role WHEN 'paused' THEN 'paused' WHEN 'done' THEN 'completed'
                       WHEN 'deleted' THEN 'deleted' ELSE 'active' END AS status,
           CASE WHEN p.role IN ('done', 'deleted') THEN NULL
                WHEN p.role = 'due' THEN p.last_ms
                ELSE p.last_ms + p.period_ms END AS next_ms,
           CASE WHEN p.role IN ('paused', 'deleted') THEN 2
                WHEN p.role = 'cron' AND p.i % 10 = 0 THEN 2 ELSE 1 END AS version,
           CASE WHEN p.role = 'due' THEN $1::bigint - 3600000 - p.i % 20 * 86400000
                WHEN p.role = 'done' THEN p.last_ms - (1 + p.i % 7) * 86400000
                ELSE p.last_ms - greatest(p.n_runs, 1) * p.period_ms - 3600000
           END AS created_ms
) d
ORDER BY p.tenant, p.job_id
"""

# One day partition's runs, in scheduled order; $1 T, $2 the day's first ms, $3 its end,
# $4 error texts. Run k of a job is at last_ms - k * period_ms.
RUNS = """
INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt, epoch,
                      lease_until, retry_at, worker, started_at, finished_at, last_error,
                      skip_reason, created_at, origin, published_at, max_attempts,
                      overlap_tracked)
SELECT p.tenant, p.job_id, pg_temp.at_ms(r.ms), p.shard_id, p.priority, s.status,
       CASE s.status WHEN 'dead' THEN p.max_attempts WHEN 'skipped' THEN 0
                     WHEN 'succeeded' THEN 1 + (r.h % 50 = 0)::int ELSE 1 END,
       1,
       CASE WHEN s.status = 'running' THEN pg_temp.at_ms($1::bigint + 60000) END,
       CASE WHEN s.status = 'retrying' THEN pg_temp.at_ms($1::bigint + 1000 * (r.h + 1)) END,
       CASE WHEN s.status <> 'skipped' THEN 'worker-' || r.h % 4 END,
       CASE WHEN s.status <> 'skipped'
            THEN pg_temp.at_ms(least(r.ms + 20 + r.h % 180, $1::bigint)) END,
       CASE s.status
            WHEN 'succeeded' THEN pg_temp.at_ms(least(r.ms + 200 + r.h * 37 % 5000, $1::bigint))
            WHEN 'dead' THEN pg_temp.at_ms(least(r.ms + 60000 * (1 + r.h % 10), $1::bigint))
            WHEN 'skipped' THEN pg_temp.at_ms(r.ms) END,
       CASE WHEN s.status IN ('dead', 'retrying') THEN ($4::text[])[r.h % 4 + 1] END,
       CASE WHEN s.status = 'skipped' THEN (ARRAY['overlap', 'misfire'])[r.h % 2 + 1] END,
       pg_temp.at_ms(r.ms + 2),
       CASE (p.i + r.k) % 100 WHEN 0 THEN 'trigger' WHEN 1 THEN 'backfill' ELSE 'schedule' END,
       CASE WHEN s.status <> 'skipped'
            THEN pg_temp.at_ms(least(r.ms + 5 + r.h % 50, $1::bigint)) END,
       p.max_attempts,
       false
FROM seed_plan p
CROSS JOIN LATERAL generate_series(
    greatest(0, ceil((p.last_ms - $3::bigint + 1)::numeric / p.period_ms))::bigint,
    least(p.n_runs - 1, floor((p.last_ms - $2::bigint)::numeric / p.period_ms))::bigint) AS k
CROSS JOIN LATERAL (
    SELECT k AS k, p.last_ms - k * p.period_ms AS ms, (p.i * 1000003 + k * 7919) % 1000 AS h
) r
CROSS JOIN LATERAL (
    SELECT CASE WHEN r.ms > $1::bigint - 120000 AND r.h < 60 THEN 'running'
                WHEN r.ms > $1::bigint - 3600000 AND r.h >= 60 AND r.h < 75 THEN 'retrying'
                WHEN r.h >= 75 AND r.h < 95 THEN 'dead'
                WHEN r.h >= 95 AND r.h < 105 THEN 'skipped'
                ELSE 'succeeded' END AS status
) s
WHERE p.n_runs > 0 AND p.last_ms >= $2::bigint
  AND p.last_ms - (p.n_runs - 1) * p.period_ms < $3::bigint
ORDER BY r.ms
"""

# The operators' side. $1 T, $2 shards.
LEADERS = """
INSERT INTO shard_leaders (shard_id, epoch, owner, since)
SELECT s, 1 + s % 5, 'scheduler-' || s % 3, pg_temp.at_ms($1::bigint - 3 * 86400000)
FROM generate_series(0, $2::int - 1) s
"""

# The tenants' job counters as the registry keeps them, and an API key each.
TENANTS_AROUND = """
WITH counted AS (
    UPDATE tenant_usage u SET jobs = c.n
    FROM (SELECT tenant, count(*) FILTER (WHERE status <> 'deleted') AS n
          FROM jobs GROUP BY tenant) c
    WHERE u.tenant = c.tenant
)
INSERT INTO api_keys (key_hash, prefix, tenant)
SELECT sha256(convert_to(name, 'UTF8')), left(md5(name), 8), name FROM tenants
"""

# A pause per paused job, and 30 pauses and resumes of the hot job. $1 T, $2 tenant, $3 job.
ACTIONS = """
INSERT INTO ops_audit (at, operator, action, tenant, job_id, result)
SELECT updated_at, 'operator-' || length(job_id) % 3, 'pause', tenant, job_id, 'paused'
FROM jobs WHERE status = 'paused'
UNION ALL
SELECT pg_temp.at_ms($1::bigint - a * 86400000), 'operator-' || a % 3,
       CASE WHEN a % 2 = 0 THEN 'pause' ELSE 'resume' END, $2::text, $3::text,
       CASE WHEN a % 2 = 0 THEN 'paused' ELSE 'resumed' END
FROM generate_series(1::bigint, 30) a
ORDER BY 1
"""

# 40 replays, one every 15 hours, each of up to 100 runs that died in the 15 hours before it.
# $1 T, $2 the large tenant.
REPLAYS = """
INSERT INTO replay_audit (started_at, finished_at, operator, filters, attempts, rate_per_s,
                          outcome)
SELECT pg_temp.at_ms($1::bigint - a * 15 * 3600000),
       pg_temp.at_ms($1::bigint - a * 15 * 3600000 + 120000),
       'operator-' || a % 3,
       jsonb_build_object('tenant', CASE WHEN a % 2 = 0 THEN $2::text END, 'hours', 15),
       CASE WHEN a % 2 = 0 THEN 3 END, 50, 'completed'
FROM generate_series(40::bigint, 1, -1) a
"""

REPLAYED_RUNS = """
INSERT INTO replay_audit_runs (audit_id, tenant, job_id, scheduled_at, outcome, reason)
SELECT a.id, r.tenant, r.job_id, r.scheduled_at,
       (ARRAY['replayed', 'replayed', 'skipped', 'refused'])[r.n % 4 + 1],
       (ARRAY[NULL, NULL, 'the job is paused', 'over the replay budget'])[r.n % 4 + 1]
FROM replay_audit a
CROSS JOIN LATERAL (
    SELECT tenant, job_id, scheduled_at, row_number() OVER () AS n
    FROM job_runs
    WHERE status = 'dead' AND finished_at < a.started_at
      AND finished_at >= a.started_at - interval '15 hours'
    ORDER BY finished_at DESC
    LIMIT 100) r
"""

# The hot job's newest dead run at least 10 days old: the run the replays keep meeting.
# $1 tenant, $2 job, $3 T.
REPLAYED_RUN = """
SELECT (extract(epoch FROM scheduled_at) * 1000)::bigint
FROM job_runs
WHERE tenant = $1 AND job_id = $2 AND status = 'dead'
  AND scheduled_at < pg_temp.at_ms($3::bigint - 10 * 86400000)
ORDER BY scheduled_at DESC
LIMIT 1
"""

# That run in the 15 replays after it died. $1 tenant, $2 job, $3 its scheduled ms.
REPLAYED_RUN_AUDITS = """
INSERT INTO replay_audit_runs (audit_id, tenant, job_id, scheduled_at, outcome, reason)
SELECT a.id, $1::text, $2::text, pg_temp.at_ms($3::bigint),
       (ARRAY['replayed', 'skipped', 'refused'])[a.id % 3 + 1],
       (ARRAY[NULL, 'the job is paused', 'over the replay budget'])[a.id % 3 + 1]
FROM replay_audit a
WHERE a.started_at > pg_temp.at_ms($3::bigint + 3600000)
ORDER BY a.id
LIMIT 15
ON CONFLICT DO NOTHING
"""

# Each replay's counts, from its runs.
REPLAY_COUNTS = """
UPDATE replay_audit a
SET selected = c.n, replayed = c.replayed, skipped = c.skipped, refused = c.refused
FROM (SELECT audit_id, count(*) AS n,
             count(*) FILTER (WHERE outcome = 'replayed') AS replayed,
             count(*) FILTER (WHERE outcome = 'skipped') AS skipped,
             count(*) FILTER (WHERE outcome = 'refused') AS refused
      FROM replay_audit_runs GROUP BY audit_id) c
WHERE a.id = c.audit_id
"""

# Pause notes, when the schema has them (migration 0016): a third of the paused jobs.
PAUSE_NOTES = """
INSERT INTO job_pause_notes (tenant, job_id, version, paused_by, reason, paused_at)
SELECT tenant, job_id, version, 'operator-' || length(job_id) % 3,
       'paused while the downstream service is migrated', updated_at
FROM jobs
WHERE status = 'paused' AND right(job_id, 1) IN ('0', '3', '6')
"""


async def _timed(phases: dict[str, float], name: str, work: Awaitable[Any]) -> Any:
    start = time.perf_counter()
    result = await work
    phases[name] = round(time.perf_counter() - start, 1)
    print(f"  seeded {name} in {phases[name]} s", file=sys.stderr)
    return result


async def _seed_jobs(conn: asyncpg.Connection, jobs: int, runs: int, shards: int, t: int) -> None:
    """The tenants, the jobs' keys copied in, each job's plan checked, the jobs written."""
    await conn.execute(
        "INSERT INTO tenants (name) SELECT unnest($1::text[])", [n for n, _ in tenant_sizes(jobs)]
    )
    hot, each, more = hot_runs(runs)
    if hot > tenant_sizes(jobs)[0][1]:
        raise SystemExit(f"{runs:,} runs need {hot:,} hot jobs: more than {BIG_TENANT} has")
    await conn.execute(KEYS_TABLE)
    await conn.copy_records_to_table("seed_keys", records=job_keys(jobs, shards))
    await conn.execute(PLAN, t, hot, each, more, runs - (hot * each + more))
    await conn.execute("ANALYZE seed_plan")  # a temp table has no statistics else
    check = await conn.fetchrow(PLAN_CHECK)
    assert check is not None  # an aggregate has its row
    if check["runs"] != runs or check["least"] < 0 or check["span_ms"] >= LEDGER_DAYS * DAY_MS:
        raise SystemExit(
            f"{runs:,} runs do not fit {jobs:,} jobs over {LEDGER_DAYS} days "
            f"(plan: {dict(check)}); ask for at least 2 runs per job"
        )
    await conn.execute(JOBS, t, list(HANDLERS))


async def _seed_runs(conn: asyncpg.Connection, t: int) -> None:
    """The 30 days' partitions, then each day's runs in one statement, in scheduled order."""
    first = dt.datetime.fromtimestamp((t - LEDGER_DAYS * DAY_MS) / 1000, dt.UTC).date()
    last = dt.datetime.fromtimestamp(t / 1000, dt.UTC).date()
    await conn.fetchval(QUERIES["partitions_ensure"], first, (last - first).days + 1)
    epoch = dt.date(1970, 1, 1)
    for offset in range((last - first).days + 1):
        day_ms = ((first - epoch).days + offset) * DAY_MS
        await conn.execute(RUNS, t, max(day_ms, t - LEDGER_DAYS * DAY_MS), day_ms + DAY_MS, ERRORS)


async def _seed_around(conn: asyncpg.Connection, shards: int, t: int, hot: str) -> str:
    """Leaders, counters, keys, the operators' actions and replays; returns the run key the
    replays keep meeting."""
    await conn.execute(LEADERS, t, shards)
    await conn.execute(TENANTS_AROUND)
    await conn.execute(ACTIONS, t, BIG_TENANT, hot)
    await conn.execute(REPLAYS, t, BIG_TENANT)
    await conn.execute(REPLAYED_RUNS)
    ms = await conn.fetchval(REPLAYED_RUN, BIG_TENANT, hot, t)
    if ms is None:
        raise SystemExit(f"{BIG_TENANT}/{hot} has no dead run 10 days old: ask for more runs")
    await conn.execute(REPLAYED_RUN_AUDITS, BIG_TENANT, hot, ms)
    await conn.execute(REPLAY_COUNTS)
    if await conn.fetchval("SELECT to_regclass('job_pause_notes') IS NOT NULL"):
        await conn.execute(PAUSE_NOTES)
    return run_key(BIG_TENANT, hot, ms)


async def seed(dsn: str, jobs: int, runs: int, shards: int) -> Seed:
    """Seed the migrated database of `dsn` (one session: the plan is a temp table) and record
    what was seeded in its comment."""
    t = now_ms() // 1000 * 1000
    phases: dict[str, float] = {}
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET work_mem = '256MB'")  # each day's sort in memory
        # The seed's estimates cross the JIT thresholds: LLVM took ~1.3 s to compile each day's
        # statement, which then inserts a small seed's few hundred runs in 20 ms.
        await conn.execute("SET jit = off")
        await conn.execute(AT_MS)
        await _timed(phases, "jobs", _seed_jobs(conn, jobs, runs, shards, t))
        await _timed(phases, "runs", _seed_runs(conn, t))
        hot = job_id(0)
        replayed = await _timed(phases, "around", _seed_around(conn, shards, t, hot))
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await _timed(phases, "vacuum analyze", conn.execute("VACUUM (ANALYZE)"))
        done = Seed(t, jobs, runs, shards, BIG_TENANT, SMALL_TENANTS[0], hot, replayed, phases)
        comment = await conn.fetchval(
            "SELECT format('COMMENT ON DATABASE %I IS %L', current_database(), $1::text)",
            json.dumps(asdict(done)),
        )
        await conn.execute(comment)
        return done
    finally:
        await conn.close()


async def seeded(dsn: str) -> Seed:
    """The seed recorded in the database's comment (SystemExit: not one of ours)."""
    conn = await asyncpg.connect(dsn)
    try:
        text = await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database"
            " WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    try:
        return Seed(**json.loads(text))
    except (TypeError, ValueError) as err:
        raise SystemExit(f"this database was not seeded by this harness ({err})") from err
