WITH fence AS MATERIALIZED (
    SELECT 1 FROM shard_leaders
    WHERE shard_id = $1 AND epoch = $15::bigint AND owner = $16::text
    FOR SHARE
), due AS (
    SELECT p.tenant, p.job_id, c.next_ms, c.complete
    FROM unnest(string_to_array($4::text, ','), string_to_array($5::text, ','),
                string_to_array($6::text, ',')::bigint[],
                string_to_array($7::text, ',', 'n')::bigint[],
                string_to_array($8::text, ',')::boolean[])
         AS c(tenant, job_id, expected_ms, next_ms, complete)
    JOIN job_positions p ON p.tenant = c.tenant AND p.job_id = c.job_id
    WHERE EXISTS (SELECT FROM fence) AND p.shard_id = $1 AND p.status = 'active'
      AND p.next_run_at = 'epoch'::timestamptz + c.expected_ms * interval '1 millisecond'
    FOR NO KEY UPDATE OF p SKIP LOCKED
), moved AS (
    UPDATE job_positions p SET
        next_run_at = 'epoch'::timestamptz + c.next_ms * interval '1 millisecond',
        status = CASE WHEN c.complete THEN 'completed' ELSE p.status END
    FROM due c
    WHERE p.tenant = c.tenant AND p.job_id = c.job_id
    RETURNING p.tenant, p.job_id
), claimed AS (
    SELECT j.tenant, j.job_id, j.priority, j.max_attempts, j.handler, j.target::text AS target,
           j.payload::text AS payload, j.timeout_ms, j.overlap_policy
    FROM moved m JOIN jobs j ON j.tenant = m.tenant AND j.job_id = m.job_id
), inserted AS (
    INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt,
                          epoch, lease_until, max_attempts, origin, skip_reason, finished_at,
                          overlap_tracked)
    SELECT r.tenant, r.job_id, 'epoch'::timestamptz + r.ms * interval '1 millisecond', $1,
           c.priority, r.status, CASE WHEN r.status = 'pending' THEN 1 ELSE 0 END, $2,
           CASE WHEN r.leased THEN now() + $3::bigint * interval '1 millisecond' END,
           c.max_attempts, 'schedule', r.skip_reason,
           CASE WHEN r.status = 'skipped' THEN now() END, c.overlap_policy <> 'allow'
    FROM unnest(string_to_array($9::text, ','), string_to_array($10::text, ','),
                string_to_array($11::text, ',')::bigint[], string_to_array($12::text, ','),
                $13::text[], string_to_array($14::text, ',')::boolean[])
         AS r(tenant, job_id, ms, status, skip_reason, leased)
    JOIN claimed c ON c.tenant = r.tenant AND c.job_id = r.job_id
    ON CONFLICT DO NOTHING
    RETURNING tenant, job_id, scheduled_at, status, lease_until
)
SELECT c.tenant, c.job_id, NULL::bigint AS scheduled_at,
       c.priority, c.handler, c.target, c.payload, c.timeout_ms
FROM claimed c
UNION ALL
SELECT i.tenant, i.job_id, (extract(epoch FROM i.scheduled_at) * 1000)::bigint,
       NULL, NULL, NULL, NULL, NULL
FROM inserted i
WHERE i.status = 'pending' AND i.lease_until IS NOT NULL
UNION ALL
SELECT NULL, l.owner, l.epoch, NULL, NULL, NULL, NULL, NULL
FROM (SELECT) AS one LEFT JOIN shard_leaders l ON l.shard_id = $1
WHERE NOT EXISTS (SELECT FROM fence)

