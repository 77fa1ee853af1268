-- The maintenance's queries (tickwheel/maintenance.py): retention beyond the partition drops
-- of core.sql. Each statement is safe to run again and from several processes at once.

-- gc_completed_once --
-- Retention of one-off jobs: remove up to $2 completed ones whose instant and last change are
-- both older than $1. Called until it removes fewer than $2. A completed one-off counts
-- against its tenant's job quota until it is removed (migration 0012): each tenant's counter
-- goes down by its jobs removed, in the same statement, its row locked in tenant order as
-- the registry locks them.
WITH doomed AS (
    SELECT j.tenant, j.job_id
    FROM jobs j
    WHERE j.kind = 'once' AND j.status = 'completed'
      AND j.run_at < $1::timestamptz AND j.updated_at < $1::timestamptz
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
), gone AS (
    DELETE FROM jobs j USING doomed d
    WHERE j.tenant = d.tenant AND j.job_id = d.job_id
    RETURNING j.tenant, j.job_id
), per_tenant AS (
    SELECT tenant, count(*) AS removed FROM gone GROUP BY tenant
), locked AS MATERIALIZED (
    SELECT u.tenant FROM tenant_usage u
    WHERE u.tenant IN (SELECT tenant FROM per_tenant)
    ORDER BY u.tenant
    FOR UPDATE
), counted AS (
    UPDATE tenant_usage u SET jobs = u.jobs - p.removed
    FROM per_tenant p
    WHERE u.tenant = p.tenant AND u.tenant IN (SELECT tenant FROM locked)
)
SELECT tenant, job_id FROM gone

-- gc_replay_audit_runs --
-- The per-run replay records of replays older than $1 (the summaries in replay_audit stay).
DELETE FROM replay_audit_runs ar USING replay_audit a
WHERE a.id = ar.audit_id AND a.started_at < $1::timestamptz

-- gc_pause_notes --
-- Retention: pause notes that are no longer their job's (migration 0016) — the job was resumed,
-- paused again or edited since (its version moved on), or its row is gone.
DELETE FROM job_pause_notes n
WHERE NOT EXISTS (
    SELECT FROM jobs j
    WHERE j.tenant = n.tenant AND j.job_id = n.job_id AND j.version = n.version
)

-- gc_trigger_requests --
-- Retention: idempotency keys older than a day answer nothing any more.
DELETE FROM trigger_requests WHERE created_at < now() - interval '24 hours'

-- gc_registration_ids --
-- Retention: message ids of signed registrations past their expiry and past the deployment's
-- replay memory (migration 0014: the longest any of its registries keeps an id); a message
-- signed that long ago is refused by its signing instant before any id is looked up.
DELETE FROM registration_ids
WHERE expires_at < now()
  AND signed_at < now()
      - coalesce((SELECT replay_memory_ms FROM deployment), 0) * interval '1 millisecond'

-- gc_target_hosts --
-- Retention: rows of `target_hosts` (a host's limit, or a job's own share `job:<tenant>/<job_id>`)
-- that no call has written since $1 and that hold nothing a new row would not: the rate's
-- theoretical arrival time passed, no failure counted, the breaker closed, no probe alive.
-- The next call to such a key adds its row again (`target_host_add`) and is granted what this
-- row would have granted; without this a job's row outlived the job. A call that writes the
-- row meanwhile (its `target_take` locks it) moves `updated_at`, and the row stays.
DELETE FROM target_hosts
WHERE updated_at < $1::timestamptz AND failures = 0
  AND (open_until IS NULL OR open_until <= now())
  AND (probe_until IS NULL OR probe_until <= now())
  AND tat_us <= (extract(epoch FROM now()) * 1000000)::bigint
