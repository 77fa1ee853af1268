-- Runs on demand (registry_api/on_demand.py): triggers and backfills write `retrying` rows at
-- attempt 0 that the shard's leader claims when their `retry_at` comes, like any retry (I6);
-- replays (registry_api/replay.py) make dead runs such `retrying` rows again, and record what
-- they did in the replay audit.
-- Times cross this boundary as integer UTC milliseconds since the epoch.

-- on_demand_db_now --
-- The database's clock (not the transaction's start), floored to the millisecond: a trigger's
-- instant, and what "a range reaching into the future" is measured against.
SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms

-- trigger_request_get --
-- The run an idempotency key started within the last 24 hours, if any.
SELECT (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_at
FROM trigger_requests
WHERE tenant = $1 AND job_id = $2 AND idempotency_key = $3
  AND created_at > now() - interval '24 hours'

-- trigger_request_put --
-- Remember the run a key started (replacing a row older than 24 hours).
INSERT INTO trigger_requests (tenant, job_id, idempotency_key, scheduled_at)
VALUES ($1, $2, $3, 'epoch'::timestamptz + $4::bigint * interval '1 millisecond')
ON CONFLICT (tenant, job_id, idempotency_key) DO UPDATE
SET scheduled_at = EXCLUDED.scheduled_at, created_at = now()

-- trigger_insert --
-- One triggered run at $3 ms, due at once; nothing when that run key is taken (the caller
-- tries the next millisecond). The job's row gives shard, priority and attempt budget.
INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt, epoch,
                      retry_at, max_attempts, origin, overlap_tracked)
SELECT j.tenant, j.job_id, 'epoch'::timestamptz + $3::bigint * interval '1 millisecond',
       j.shard_id, j.priority, 'retrying', 0, 0,
       'epoch'::timestamptz + $3::bigint * interval '1 millisecond', j.max_attempts, 'trigger',
       j.overlap_policy <> 'allow'
FROM jobs j
WHERE j.tenant = $1 AND j.job_id = $2
ON CONFLICT DO NOTHING
RETURNING (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_at

-- backfill_jobs_read --
-- The jobs of a batch's backfills as stored now, without a lock, and the database's clock
-- (as on_demand_db_now): their occurrences are counted before the batch's transaction
-- (registry_api/store.py), so a range refused for its size holds no lock and no connection.
SELECT j.tenant, j.job_id, j.document, j.status, j.version,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.intake_partition, j.intake_offset,
       floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
FROM jobs j
JOIN unnest($1::text[], $2::text[]) AS k(tenant, job_id)
  ON j.tenant = k.tenant AND j.job_id = k.job_id

-- backfill_insert --
-- One run per occurrence ($3, ms, ascending) that has no run yet, due one after the other
-- $4 ms apart (the backfill rate), from now, or from just after the job's last backfill run
-- still waiting, so that concurrent backfills of one job share its rate. Returns the
-- occurrences created.
WITH waiting AS (
    SELECT max(r.retry_at) AS last_at
    FROM job_runs r
    WHERE r.tenant = $1 AND r.job_id = $2 AND r.status = 'retrying' AND r.attempt = 0
      AND r.origin = 'backfill'
), todo AS (
    SELECT k.ms, row_number() OVER (ORDER BY k.ms) - 1 AS n
    FROM unnest($3::bigint[]) AS k(ms)
    WHERE NOT EXISTS (
        SELECT 1 FROM job_runs r
        WHERE r.tenant = $1 AND r.job_id = $2
          AND r.scheduled_at = 'epoch'::timestamptz + k.ms * interval '1 millisecond')
)
INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt, epoch,
                      retry_at, max_attempts, origin, overlap_tracked)
SELECT j.tenant, j.job_id, 'epoch'::timestamptz + t.ms * interval '1 millisecond',
       j.shard_id, j.priority, 'retrying', 0, 0,
       greatest(now(), w.last_at + $4::double precision * interval '1 millisecond')
           + t.n * $4::double precision * interval '1 millisecond',
       j.max_attempts, 'backfill', j.overlap_policy <> 'allow'
FROM todo t CROSS JOIN waiting w JOIN jobs j ON j.tenant = $1 AND j.job_id = $2
ON CONFLICT DO NOTHING
RETURNING (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_at

-- runs_notify --
-- Wake-up hint for the job's shard leader (shards/feed.py): runs on demand were written, load
-- them now. Sent at commit (a rolled-back dry run sends nothing); a lost hint only delays the
-- runs to the leader's next sweep.
SELECT pg_notify('tickwheel_runs', j.shard_id::text)
FROM jobs j
WHERE j.tenant = $1 AND j.job_id = $2

-- replay_lock_candidates --
-- Step 1 of replaying a chunk of dead letters (registry_api/replay.py): the run rows of the
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
