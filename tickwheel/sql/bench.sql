-- The harnesses' queries (bench/): the benchmarks' (bench_, baseline_ for the naive
-- pollers, floor_ for the floor), the chaos harness's (chaos_) and the demo's (demo_), and the ledger every harness
-- checks (bench_ledger_runs). They run only against the harnesses' own databases, scratch or
-- private, and their own tenants. Instants leave as integer unix milliseconds.

-- bench_runs --
-- Every run row with its lifecycle instants: what the analysis is computed from.
SELECT tenant, job_id,
       (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms,
       (extract(epoch FROM created_at) * 1000)::bigint AS claimed_ms,
       (extract(epoch FROM published_at) * 1000)::bigint AS published_ms,
       (extract(epoch FROM started_at) * 1000)::bigint AS started_ms,
       (extract(epoch FROM finished_at) * 1000)::bigint AS finished_ms,
       status, attempt
FROM job_runs

-- bench_progress --
-- Progress bars: runs claimed, started (or further) and succeeded so far. (A run's row is not
-- written when it is published: the final figures read publishes from the run topics.)
SELECT count(*) AS claimed,
       count(*) FILTER (WHERE started_at IS NOT NULL) AS started,
       count(*) FILTER (WHERE status = 'succeeded') AS completed
FROM job_runs

-- bench_jobs_count --
SELECT count(*) FROM jobs

-- bench_shards_led --
-- Shards whose leader has taken over (scheduler start-up is complete when all are).
SELECT count(*) FROM shard_leaders WHERE owner IS NOT NULL

-- bench_backends --
-- The server processes of this database's connections (their CPU is read from /proc).
SELECT pid FROM pg_stat_activity WHERE datname = current_database()

-- bench_statement_stats --
-- pg_stat_statements in a harness's scratch database (the dev stack preloads its library), so
-- that the WAL its statements write can be read apart from the rest of the server's
-- (`bench_statement_wal`). Needs a superuser, as the dev stack's role is.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements

-- bench_statement_wal --
-- The WAL written by the statements run in this database so far, as pg_stat_statements counts
-- it (full-page images included, commit records and autovacuum not): what a phase of the
-- statements harness wrote, whatever other databases of the server write meanwhile.
SELECT coalesce(sum(wal_bytes), 0)::bigint FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())

-- bench_tenant --
INSERT INTO tenants (name) VALUES ($1) ON CONFLICT DO NOTHING

-- bench_ledger_runs --
-- Every run row of a tenant: the ledger the harnesses' checker reads (bench/ledger.py RunRow).
SELECT job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms, status,
       attempt, shard_id, worker,
       (extract(epoch FROM published_at) * 1000)::bigint AS published_ms,
       (extract(epoch FROM started_at) * 1000)::bigint AS started_ms, epoch,
       (extract(epoch FROM created_at) * 1000)::bigint AS created_ms,
       (extract(epoch FROM finished_at) * 1000)::bigint AS finished_ms
FROM job_runs
WHERE tenant = $1

-- bench_make_due --
-- The baseline's data: the same one-off jobs, all due from the moment the pollers start.
UPDATE jobs SET next_run_at = $1::timestamptz, run_at = $1::timestamptz WHERE status = 'active'

-- bench_analyze_jobs --
ANALYZE jobs

-- baseline_index --
-- The index the naive design polls through (it has no shards): due active jobs in due order.
CREATE INDEX IF NOT EXISTS jobs_due_naive ON jobs (next_run_at) WHERE status = 'active'

-- baseline_poll --
-- The naive claim, step 1: lock a page of due jobs that no other poller holds.
SELECT tenant, job_id, shard_id, priority, handler, payload::text AS payload, timeout_ms,
       max_attempts, (extract(epoch FROM next_run_at) * 1000)::bigint AS scheduled_ms
FROM jobs
WHERE status = 'active' AND next_run_at <= now()
ORDER BY next_run_at
LIMIT 500
FOR UPDATE SKIP LOCKED

-- baseline_insert_run --
-- Step 2, per row: the run row.
INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt, epoch,
                      max_attempts)
VALUES ($1, $2, 'epoch'::timestamptz + $3::bigint * interval '1 millisecond', $4, $5,
        'pending', 1, 0, $6)

-- baseline_complete_job --
-- Step 3, per row: the one-off job is done.
UPDATE jobs SET status = 'completed', next_run_at = NULL WHERE tenant = $1 AND job_id = $2

-- chaos_jobs_count --
SELECT count(*) AS n FROM jobs WHERE tenant = $1 AND status <> 'deleted'

-- chaos_jobs_delete --
-- The steady jobs end with their round: deleted as the registry deletes (version bump).
UPDATE jobs SET status = 'deleted', version = version + 1
WHERE tenant = $1 AND job_id = ANY($2::text[]) AND status <> 'deleted'

-- chaos_retire_earlier --
-- What earlier invocations left on a kept `--dir`, retired before this one's processes start.
-- An invocation interrupted mid-round never deleted its round's every-second cron jobs: the
-- next one's leaders fired them, and their runs flooded its rounds (D-262). Every chaos tenant's (the harness names them `s<seed>t<n>r<round>` and
-- `s<seed>t<n>warm`; nothing of this invocation exists yet) jobs still scheduled are deleted as
-- the registry deletes, and its unfinished runs end `skipped` (a worker still holding one is
-- fenced out by the status). Returns how many of each.
WITH chaos AS (
    SELECT name FROM tenants WHERE name ~ '^s[0-9]+t[0-9]+(r[0-9]+|warm)$'
), retired_jobs AS (
    UPDATE jobs SET status = 'deleted', version = version + 1
    WHERE tenant IN (SELECT name FROM chaos) AND status IN ('active', 'paused')
    RETURNING 1
), retired_runs AS (
    UPDATE job_runs SET status = 'skipped', finished_at = now(), lease_until = NULL,
                        retry_at = NULL,
                        skip_reason = 'retired: left by an earlier chaos invocation'
    WHERE tenant IN (SELECT name FROM chaos)
      AND status IN ('pending', 'published', 'running', 'retrying')
    RETURNING 1
)
SELECT (SELECT count(*) FROM retired_jobs) AS jobs, (SELECT count(*) FROM retired_runs) AS runs

-- chaos_jobs_pause --
-- A steady job paused mid-round, as the registry pauses (version bump): no run after this.
-- No row back: the job is not stored (yet).
UPDATE jobs SET status = 'paused', version = version + 1
WHERE tenant = $1 AND job_id = ANY($2::text[]) AND status = 'active'
RETURNING job_id

-- chaos_shard_epochs --
-- Every shard's epoch and when its takeover began (database clock): the harness's record of
-- takeovers, for the stale-claims verdict.
SELECT shard_id, epoch, (extract(epoch FROM since) * 1000)::bigint AS since_ms
FROM shard_leaders

-- chaos_runs_held --
-- The runs a worker holds: `running` under its name. Read right after the harness killed it.
SELECT count(*) AS n FROM job_runs WHERE worker = $1 AND status = 'running'

-- chaos_jobs_behind --
-- Whether a round's active cron jobs still have an occurrence due more than a second ago that
-- no leader claimed yet (a leader held up by a fault is catching up): the round deletes its
-- jobs only once this is false, so every occurrence it judges was claimable.
SELECT coalesce(min(next_run_at) < clock_timestamp() - interval '1 second', false) AS behind
FROM jobs WHERE tenant = $1 AND job_id = ANY($2::text[]) AND status = 'active'

-- chaos_unfinished --
-- How many of the judged occurrences have no terminal row yet.
SELECT count(*) AS n
FROM unnest($2::text[], $3::bigint[]) AS w(job_id, scheduled_ms)
LEFT JOIN job_runs r
  ON r.tenant = $1 AND r.job_id = w.job_id
 AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
WHERE r.status IS NULL OR r.status NOT IN ('succeeded', 'dead', 'skipped')

-- demo_run_counts --
-- Run rows of the tenant by status, for the live view.
SELECT status, count(*) AS n
FROM job_runs
WHERE tenant = $1
GROUP BY status

-- demo_jobs --
-- The tenant's jobs with where their schedule stands (next_run_at NULL: completed or deleted).
SELECT job_id, status, (extract(epoch FROM next_run_at) * 1000)::bigint AS next_run_ms
FROM jobs
WHERE tenant = $1

-- demo_run_status --
-- One run's status (NULL: no row yet).
SELECT status
FROM job_runs
WHERE tenant = $1 AND job_id = $2
ORDER BY scheduled_at DESC
LIMIT 1

-- floor_schema --
-- The floor's tables (bench/floor.py): what a run needs and nothing else — a due job,
-- a run row keyed by the run key's parts — each with its primary key, the jobs with the one
-- index the claim walks.
CREATE TABLE floor_jobs (
    job_id  text PRIMARY KEY,
    due_at  timestamptz NOT NULL,
    done    boolean NOT NULL DEFAULT false
);
CREATE INDEX floor_jobs_due ON floor_jobs (due_at) WHERE NOT done;
CREATE TABLE floor_runs (
    job_id        text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    status        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    PRIMARY KEY (job_id, scheduled_at)
)

-- floor_jobs_load --
-- $1 job ids, $2 the instant they are all due (T0)
INSERT INTO floor_jobs (job_id, due_at) SELECT unnest($1::text[]), $2::timestamptz

-- floor_analyze --
ANALYZE floor_jobs

-- floor_claim --
-- The floor's claim, one statement per batch: the due jobs in due order are marked done and
-- their run rows inserted; returns what each run's message carries. One claimer, so no lock
-- beyond the UPDATE's own. $1 the batch size.
WITH due AS (
    SELECT job_id FROM floor_jobs
    WHERE NOT done AND due_at <= now()
    ORDER BY due_at
    LIMIT $1
), claimed AS (
    UPDATE floor_jobs j SET done = true
    FROM due
    WHERE j.job_id = due.job_id
    RETURNING j.job_id, j.due_at
)
INSERT INTO floor_runs (job_id, scheduled_at, status)
SELECT job_id, due_at, 'pending' FROM claimed
RETURNING job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms

-- floor_results --
-- The floor's result write, one statement per consumed batch: $1 job ids, $2 scheduled ms.
UPDATE floor_runs r SET status = 'succeeded', finished_at = now()
FROM unnest($1::text[], $2::bigint[]) AS w(job_id, scheduled_ms)
WHERE r.job_id = w.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
  AND r.status = 'pending'

-- floor_progress --
SELECT count(*) FROM floor_runs WHERE status = 'succeeded'

-- floor_runs --
SELECT job_id,
       (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms,
       (extract(epoch FROM created_at) * 1000)::bigint AS claimed_ms,
       (extract(epoch FROM finished_at) * 1000)::bigint AS finished_ms,
       status
FROM floor_runs
