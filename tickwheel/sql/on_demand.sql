-- Runs on demand (registry_api/on_demand.py): triggers and backfills write `retrying` rows at
-- attempt 0 that the shard's leader claims when their `retry_at` comes, like any retry (I6).
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
                      retry_at, max_attempts, origin)
SELECT j.tenant, j.job_id, 'epoch'::timestamptz + $3::bigint * interval '1 millisecond',
       j.shard_id, j.priority, 'retrying', 0, 0,
       'epoch'::timestamptz + $3::bigint * interval '1 millisecond', j.max_attempts, 'trigger'
FROM jobs j
WHERE j.tenant = $1 AND j.job_id = $2
ON CONFLICT DO NOTHING
RETURNING (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_at

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
                      retry_at, max_attempts, origin)
SELECT j.tenant, j.job_id, 'epoch'::timestamptz + t.ms * interval '1 millisecond',
       j.shard_id, j.priority, 'retrying', 0, 0,
       greatest(now(), w.last_at + $4::double precision * interval '1 millisecond')
           + t.n * $4::double precision * interval '1 millisecond',
       j.max_attempts, 'backfill'
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
