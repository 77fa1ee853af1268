-- The operators' queries (registry_api/ops/): the run ledger, jobs and replay audit across
-- tenants for `tickwheel runs|jobs|dlq`, the shards and how far behind they are for
-- `tickwheel status` and the status page, the page's bounded reads behind `/v1/ops/…`, and
-- operator keys. Every name starts with `ops_`. Times cross this boundary as integer UTC
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
-- The table's column, not the output's milliseconds of the same name: with a tenant and a job
-- the primary key yields the newest first and the LIMIT stops the read. Without them the
-- ledger is read and sorted (no index on scheduled_at alone: every run would pay for one;
-- 5.6 s at 10,000,000 runs): `--since` prunes the day partitions.
ORDER BY job_runs.scheduled_at DESC, job_runs.tenant, job_runs.job_id
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

-- ops_jobs_page --
-- One page of the jobs view (`GET /v1/ops/jobs`): jobs in (tenant, id) order after the keyset
-- cursor ($1, $2), read as one range of the primary key (tenant, job_id) that stops after $3
-- index entries whatever the filters: tenant $4, status $5 (NULL: every status but deleted),
-- handler $6, and $7 a piece of the job id (case-insensitive); NULL leaves a filter out. Up
-- to $8 matches come back as kind 'job' in key order, then one row of kind 'edge': the last
-- key read and how many were read (`scanned`), from which the caller tells the next cursor
-- (fewer than $3 read: the end). So a page reads at most $3 rows at any table size, however
-- rare its filter's hits. Each job comes with its pause note and its newest run's status.
WITH scanned AS MATERIALIZED (
    SELECT row_number() OVER (ORDER BY tenant, job_id) AS n,  -- the key order, as a number
           tenant, job_id, kind, schedule, run_at, timezone, handler, status, version,
           next_run_at, updated_at
    FROM jobs
    WHERE (tenant, job_id) > ($1::text, $2::text)
    ORDER BY tenant, job_id
    LIMIT $3
), hits AS (
    SELECT * FROM scanned
    WHERE ($4::text IS NULL OR tenant = $4::text)
      AND (CASE WHEN $5::text IS NULL THEN status <> 'deleted' ELSE status = $5::text END)
      AND ($6::text IS NULL OR handler = $6::text)
      AND ($7::text IS NULL OR strpos(lower(job_id), lower($7::text)) > 0)
    ORDER BY n
    LIMIT $8
)
(SELECT 'job' AS row_kind, h.tenant, h.job_id, h.kind, h.schedule,
        (extract(epoch FROM h.run_at) * 1000)::bigint AS run_at, h.timezone, h.handler,
        h.status, h.version, (extract(epoch FROM h.next_run_at) * 1000)::bigint AS next_run_at,
        h.updated_at, h.n AS scanned, note.paused_by, note.reason AS pause_reason,
        last.status AS last_status,
        (extract(epoch FROM last.scheduled_at) * 1000)::bigint AS last_scheduled_at
 FROM hits h
 -- the pause's note, while it is the job's (migration 0016)
 LEFT JOIN job_pause_notes note
        ON h.status = 'paused' AND note.tenant = h.tenant AND note.job_id = h.job_id
       AND note.version = h.version
 -- the newest run: one key probe per day partition, for the page's jobs only
 LEFT JOIN LATERAL (
     SELECT r.status, r.scheduled_at FROM job_runs r
     WHERE r.tenant = h.tenant AND r.job_id = h.job_id
     ORDER BY r.scheduled_at DESC
     LIMIT 1
 ) last ON true
 ORDER BY h.n)
UNION ALL
(SELECT 'edge', tenant, job_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, n,
        NULL, NULL, NULL, NULL
 FROM scanned
 ORDER BY n DESC
 LIMIT 1)

-- ops_audit_insert --
-- What an operator did from the page: who (the operator key's name), what, to which job,
-- with which result and detail (a backfill's window, a pause's note; NULL: none); when is the
-- row's `at`. Written in the change's own transaction (registry_api/ops/jobs.py `Audit`).
INSERT INTO ops_audit (operator, action, tenant, job_id, result, detail)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id

-- ops_audit_of_job --
-- The operators' actions on one job, newest first.
SELECT id, at, operator, action, result, detail
FROM ops_audit
WHERE tenant = $1 AND job_id = $2
ORDER BY id DESC
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

-- ops_replay_audit_list --
-- The latest replays first.
SELECT id, started_at, finished_at, operator, filters, attempts, rate_per_s, outcome,
       selected, replayed, skipped, refused
FROM replay_audit
ORDER BY id DESC
LIMIT $1

-- ops_replay_audit_get --
-- One replay by its id.
SELECT id, started_at, finished_at, operator, filters, attempts, rate_per_s, outcome,
       selected, replayed, skipped, refused
FROM replay_audit
WHERE id = $1

-- ops_replay_audit_of_run --
-- What each replay did to one run, oldest first.
SELECT a.id, a.started_at, a.operator, ar.outcome, ar.reason
FROM replay_audit_runs ar JOIN replay_audit a ON a.id = ar.audit_id
WHERE ar.tenant = $1 AND ar.job_id = $2
  AND ar.scheduled_at = 'epoch'::timestamptz + $3::bigint * interval '1 millisecond'
ORDER BY a.id

-- ops_shard_leaders --
-- The last takeover of each shard: who, which epoch, since when.
SELECT shard_id, owner, epoch, (extract(epoch FROM since) * 1000)::bigint AS since_ms
FROM shard_leaders
ORDER BY shard_id

-- ops_shards_behind --
-- Per shard, how long its oldest due job has waited to be claimed (no row: none is due).
-- Reads the partial index jobs_due (shard_id, next_run_at).
SELECT shard_id, (extract(epoch FROM now() - min(next_run_at)) * 1000)::bigint AS behind_ms
FROM jobs
WHERE status = 'active' AND next_run_at <= now()
GROUP BY shard_id

-- ops_key_insert --
INSERT INTO operator_keys (key_hash, prefix, name) VALUES ($1, $2, $3)

-- ops_key_revoke --
-- Revoke NAME's active key; no row back: NAME has none.
UPDATE operator_keys SET revoked_at = now()
WHERE name = $1 AND revoked_at IS NULL
RETURNING prefix

-- ops_operator_by_key --
SELECT name FROM operator_keys WHERE key_hash = $1 AND revoked_at IS NULL

-- ops_run_rates --
-- Per bucket of $3 ms in [$1, $2) ms (bucket = floor((t - $1) / $3)), what happened to runs:
--   created    run rows inserted to be executed (claims, triggers; skipped rows not counted)
--   published  runs whose envelope was produced in the bucket (`published_at`, recorded by
--              the worker's claim from the record's timestamp)
--   finished   runs that ended succeeded or dead in the bucket;  dead  those that ended dead
--   lag p50/p99  dispatch lag in ms of the scheduled runs first published in the bucket:
--              publish instant minus scheduled instant (close to the leader's
--              tickwheel_scheduler_dispatch_lag_seconds, measured at the broker's ack)
-- Bounded: only runs scheduled in [$1 - $4, $2) are read (partition pruning), finished ones
-- through the index job_runs_finished and those in flight through job_runs_lease and
-- job_runs_retry (one arm of the OR each), so the cost follows the window and the runs in
-- flight, not the ledger. A run scheduled before that
-- (a retry after a long backoff, a catch-up of old occurrences) is not counted. Skipped rows
-- count nowhere. Ordered-set aggregates skip NULLs: each percentile sees only first publishes.
SELECT floor((extract(epoch FROM e.at) * 1000 - $1::bigint) / $3::bigint)::integer AS bucket,
       count(*) FILTER (WHERE e.kind = 'created') AS created,
       count(*) FILTER (WHERE e.kind = 'published') AS published,
       count(*) FILTER (WHERE e.kind = 'finished') AS finished,
       count(*) FILTER (WHERE e.kind = 'finished' AND r.status = 'dead') AS dead,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY e.lag_ms) AS lag_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY e.lag_ms) AS lag_p99_ms
FROM job_runs r
CROSS JOIN LATERAL (VALUES
    ('created', r.created_at, NULL::double precision),
    ('published', r.published_at,
     CASE WHEN r.attempt = 1 AND r.origin = 'schedule'
          THEN extract(epoch FROM r.published_at - r.scheduled_at) * 1000 END),
    ('finished', CASE WHEN r.status IN ('succeeded', 'dead') THEN r.finished_at END, NULL)
) AS e(kind, at, lag_ms)
WHERE r.scheduled_at >= 'epoch'::timestamptz + ($1::bigint - $4::bigint) * interval '1 millisecond'
  AND r.scheduled_at < 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'
  AND (r.status IN ('succeeded', 'dead')
       OR r.status IN ('pending', 'published', 'running')
       OR r.status = 'retrying')
  AND e.at >= 'epoch'::timestamptz + $1::bigint * interval '1 millisecond'
  AND e.at < 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'
GROUP BY 1
ORDER BY 1

-- ops_dead_runs --
-- The newest dead runs that died at or after $1 ms, newest first, at most $2 (index
-- job_runs_dead).
SELECT tenant, job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms,
       attempt, (extract(epoch FROM finished_at) * 1000)::bigint AS dead_ms, last_error
FROM job_runs
WHERE status = 'dead'
  AND finished_at >= 'epoch'::timestamptz + $1::bigint * interval '1 millisecond'
ORDER BY finished_at DESC
LIMIT $2

-- ops_dead_letters --
-- The operators' page's dead letters (D-280): the ledger's dead runs, the oldest death first,
-- filtered by when they died ($1 ms, at or after; NULL: any time), tenant $2, job id $3 and an
-- ILIKE pattern over the last error $4 (`%piece%`, found through `job_runs_dead_error`,
-- migration 0017); NULL leaves a filter out; at most $5. In the order of `job_runs_dead`
-- (finished_at), so a page stops reading at its LIMIT.
SELECT tenant, job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms,
       attempt, (extract(epoch FROM finished_at) * 1000)::bigint AS dead_ms, last_error
FROM job_runs
WHERE status = 'dead'
  AND ($1::bigint IS NULL
       OR finished_at >= 'epoch'::timestamptz + $1::bigint * interval '1 millisecond')
  AND ($2::text IS NULL OR tenant = $2::text)
  AND ($3::text IS NULL OR job_id = $3::text)
  AND ($4::text IS NULL OR last_error ILIKE $4::text)
ORDER BY job_runs.finished_at, job_runs.tenant, job_runs.job_id, job_runs.scheduled_at
LIMIT $5

-- ops_dead_letters_count --
-- How many dead runs `ops_dead_letters`' filters ($1-$4) select, counted up to $5 (a page says
-- "10,000+" rather than read every dead run of a month).
SELECT count(*)
FROM (SELECT FROM job_runs
      WHERE status = 'dead'
        AND ($1::bigint IS NULL
             OR finished_at >= 'epoch'::timestamptz + $1::bigint * interval '1 millisecond')
        AND ($2::text IS NULL OR tenant = $2::text)
        AND ($3::text IS NULL OR job_id = $3::text)
        AND ($4::text IS NULL OR last_error ILIKE $4::text)
      LIMIT $5) AS capped

-- job_pause_note_write --
-- Who paused a job and why, on the version the pause gave it (migration 0016); replaces the
-- job's earlier note.
--   $1 tenant  $2 job id  $3 version  $4 by  $5 reason
INSERT INTO job_pause_notes (tenant, job_id, version, paused_by, reason)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, job_id) DO UPDATE
SET version = EXCLUDED.version, paused_by = EXCLUDED.paused_by, reason = EXCLUDED.reason,
    paused_at = now()

-- job_pause_note_get --
-- A paused job's note, if its pause left one: only a note on the job's current version is
-- still its (a resume, a later pause or an edit moved the version on).
SELECT n.paused_by, n.reason, n.paused_at
FROM job_pause_notes n
JOIN jobs j ON j.tenant = n.tenant AND j.job_id = n.job_id AND j.version = n.version
WHERE n.tenant = $1 AND n.job_id = $2 AND j.status = 'paused'
