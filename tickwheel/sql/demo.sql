-- The queries of `tickwheel demo` (tickwheel/demo.py), over its own tenant. Times leave as
-- integer UTC milliseconds.

-- demo_runs --
-- Every run row of the tenant: the ledger the demo's summary checks.
SELECT job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms, status,
       attempt
FROM job_runs
WHERE tenant = $1

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
