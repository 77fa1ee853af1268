-- The fault-injection harness's reads and set-up (tickwheel/chaos/). Instants leave as unix ms.

-- chaos_tenant_create --
INSERT INTO tenants (name) VALUES ($1) ON CONFLICT DO NOTHING

-- chaos_jobs_count --
SELECT count(*) AS n FROM jobs WHERE tenant = $1 AND status <> 'deleted'

-- chaos_jobs_delete --
-- The steady jobs end with their round: deleted as the registry deletes (version bump).
UPDATE jobs SET status = 'deleted', version = version + 1
WHERE tenant = $1 AND job_id = ANY($2::text[]) AND status <> 'deleted'

-- chaos_db_now_ms --
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms

-- chaos_unfinished --
-- How many of the judged occurrences have no terminal row yet.
SELECT count(*) AS n
FROM unnest($2::text[], $3::bigint[]) AS w(job_id, scheduled_ms)
LEFT JOIN job_runs r
  ON r.tenant = $1 AND r.job_id = w.job_id
 AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
WHERE r.status IS NULL OR r.status NOT IN ('succeeded', 'dead', 'skipped')

-- chaos_runs --
SELECT job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms, shard_id,
       status, attempt, worker,
       (extract(epoch FROM published_at) * 1000)::bigint AS published_ms,
       (extract(epoch FROM started_at) * 1000)::bigint AS started_ms
FROM job_runs WHERE tenant = $1

-- chaos_shard_owners --
SELECT shard_id, owner FROM shard_leaders
