-- The operators' cross-tenant reads behind `/v1/ops/…` and the `/ui` status page
-- (registry_api/ops_store.py), and operator keys. Times leave as integer UTC milliseconds.
-- The shards' leaders and how far behind they are come from status.sql (`tickwheel status`).

-- operator_key_insert --
INSERT INTO operator_keys (key_hash, prefix, name) VALUES ($1, $2, $3)

-- operator_key_revoke --
-- Revoke NAME's active key; no row back: NAME has none.
UPDATE operator_keys SET revoked_at = now()
WHERE name = $1 AND revoked_at IS NULL
RETURNING prefix

-- operator_by_key --
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
-- through the index job_runs_finished and those in flight through job_runs_in_flight, so the
-- cost follows the window and the runs in flight, not the ledger. A run scheduled before that
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
       OR r.status IN ('pending', 'published', 'running', 'retrying'))
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
