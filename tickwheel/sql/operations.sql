-- The operators' queries (tickwheel/operations/). Times cross this boundary as integer UTC
-- milliseconds since the epoch, converted exactly with interval arithmetic, as in registry.sql.

-- ops_runs_list --
-- Runs newest first, filtered by any of tenant, job id, status and a lower bound on
-- scheduled_at (ms); NULL leaves a filter out.
SELECT tenant, job_id,
       (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_at,
       shard_id, priority, status, attempt, max_attempts, origin, worker,
       retry_at, started_at, finished_at, last_error, skip_reason
FROM job_runs
WHERE ($1::text IS NULL OR tenant = $1::text)
  AND ($2::text IS NULL OR job_id = $2::text)
  AND ($3::text IS NULL OR status = $3::text)
  AND ($4::bigint IS NULL
       OR scheduled_at >= 'epoch'::timestamptz + $4::bigint * interval '1 millisecond')
ORDER BY scheduled_at DESC, tenant, job_id
LIMIT $5

-- ops_run_get --
-- One run by its run key's parts, with its job's status (NULL: no such job row).
SELECT r.tenant, r.job_id,
       (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
       r.shard_id, r.priority, r.status, r.attempt, r.max_attempts, r.origin, r.epoch,
       r.worker, r.lease_until, r.retry_at, r.published_at, r.started_at, r.finished_at,
       r.last_error, r.skip_reason, r.created_at, j.status AS job_status
FROM job_runs r
LEFT JOIN jobs j ON j.tenant = r.tenant AND j.job_id = r.job_id
WHERE r.tenant = $1 AND r.job_id = $2
  AND r.scheduled_at = 'epoch'::timestamptz + $3::bigint * interval '1 millisecond'

-- ops_jobs_list --
-- Jobs across tenants in (tenant, id) order; deleted ones only when asked for by status.
SELECT tenant, job_id, kind, schedule,
       (extract(epoch FROM run_at) * 1000)::bigint AS run_at,
       timezone, priority, status, version, shard_id,
       (extract(epoch FROM next_run_at) * 1000)::bigint AS next_run_at, updated_at
FROM jobs
WHERE ($1::text IS NULL OR tenant = $1::text)
  AND (CASE WHEN $2::text IS NULL THEN status <> 'deleted' ELSE status = $2::text END)
ORDER BY tenant, job_id
LIMIT $3

-- ops_backfill_progress --
-- How far a backfill got: of the job's backfill runs scheduled in [$3, $4] (ms), how many have
-- been dispatched (left `retrying` at attempt 0: claimed, held or skipped by the leader).
SELECT count(*) AS total,
       count(*) FILTER (WHERE NOT (status = 'retrying' AND attempt = 0)) AS dispatched
FROM job_runs
WHERE tenant = $1 AND job_id = $2 AND origin = 'backfill'
  AND scheduled_at BETWEEN 'epoch'::timestamptz + $3::bigint * interval '1 millisecond'
                       AND 'epoch'::timestamptz + $4::bigint * interval '1 millisecond'

-- replay_lock_candidates --
-- Step 1 of replaying a chunk of dead letters (operations/replay.py): the run rows of the
-- chunk's run keys, locked until the chunk's transaction ends, with their job's status and
-- attempt budget. A run key with no row comes back with NULL run columns. (The lock is taken
-- in its own CTE: Postgres refuses FOR UPDATE on the nullable side of an outer join.)
WITH k AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(tenant, job_id, scheduled_ms)
), locked AS (
    SELECT r.tenant, r.job_id, r.scheduled_at, r.status, r.origin
    FROM job_runs r
    JOIN k ON r.tenant = k.tenant AND r.job_id = k.job_id
          AND r.scheduled_at = 'epoch'::timestamptz + k.scheduled_ms * interval '1 millisecond'
    FOR UPDATE OF r
)
SELECT k.tenant, k.job_id, k.scheduled_ms, l.status, l.origin,
       j.status AS job_status, j.max_attempts AS job_max_attempts
FROM k
LEFT JOIN locked l
  ON l.tenant = k.tenant AND l.job_id = k.job_id
 AND l.scheduled_at = 'epoch'::timestamptz + k.scheduled_ms * interval '1 millisecond'
LEFT JOIN jobs j ON j.tenant = k.tenant AND j.job_id = k.job_id

-- replay_mark --
-- Step 2: the operator transition dead → retrying (tickwheel/domain.py): due now by the
-- database's clock, a fresh budget on top of the attempts spent, origin replay. `attempt`
-- stays as it is, so a stale delivery of an old attempt cannot claim the replayed run. The
-- status condition repeats the decision's, so a row that is not dead is never touched.
UPDATE job_runs r
SET status = 'retrying', retry_at = now(), max_attempts = r.attempt + k.budget,
    origin = 'replay', lease_until = NULL
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::integer[])
     AS k(tenant, job_id, scheduled_ms, budget)
WHERE r.tenant = k.tenant AND r.job_id = k.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + k.scheduled_ms * interval '1 millisecond'
  AND r.status = 'dead'
RETURNING r.tenant, r.job_id

-- replay_audit_start --
INSERT INTO replay_audit (operator, filters, attempts, rate_per_s)
VALUES ($1, $2::jsonb, $3, $4)
RETURNING id

-- replay_audit_runs_insert --
INSERT INTO replay_audit_runs (audit_id, tenant, job_id, scheduled_at, outcome, reason)
SELECT $1, k.tenant, k.job_id,
       'epoch'::timestamptz + k.scheduled_ms * interval '1 millisecond', k.outcome, k.reason
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[])
     AS k(tenant, job_id, scheduled_ms, outcome, reason)
ON CONFLICT DO NOTHING

-- replay_audit_finish --
UPDATE replay_audit
SET finished_at = now(), outcome = $2, selected = $3, replayed = $4, skipped = $5, refused = $6
WHERE id = $1

-- replay_audit_list --
-- The latest replays first.
SELECT id, started_at, finished_at, operator, filters, attempts, rate_per_s, outcome,
       selected, replayed, skipped, refused
FROM replay_audit
ORDER BY id DESC
LIMIT $1

-- replay_audit_of_run --
-- What each replay did to one run, oldest first.
SELECT a.id, a.started_at, a.operator, ar.outcome, ar.reason
FROM replay_audit_runs ar JOIN replay_audit a ON a.id = ar.audit_id
WHERE ar.tenant = $1 AND ar.job_id = $2
  AND ar.scheduled_at = 'epoch'::timestamptz + $3::bigint * interval '1 millisecond'
ORDER BY a.id
