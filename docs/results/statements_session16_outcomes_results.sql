WITH w AS (
    SELECT * FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
            string_to_array($5::text, ','), string_to_array($6::text, ',', 'n')::bigint[],
            $7::text[])
     AS w(tenant, job_id, scheduled_ms, attempt, status, delay_ms, error)
), ok AS (
    SELECT w.tenant, w.job_id, r.scheduled_at, w.attempt, w.status, w.error
    FROM w JOIN job_runs r ON r.tenant = w.tenant AND r.job_id = w.job_id
      AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
    WHERE r.attempt = w.attempt AND r.status = $8::text
)
INSERT INTO run_outcomes (tenant, job_id, scheduled_at, attempt, status, finished_at, error)
SELECT tenant, job_id, scheduled_at, attempt, status, now(), error FROM ok
ON CONFLICT DO NOTHING
RETURNING tenant, job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms
