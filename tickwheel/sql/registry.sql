-- The registry's queries (registry_api/store.py). Times cross this boundary as integer
-- milliseconds since the epoch, converted exactly with interval arithmetic.

-- jobs_lock_batch --
-- The current rows of a batch's jobs, locked until the batch's transaction ends.
SELECT j.tenant, j.job_id, j.document, j.status, j.version,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.intake_partition, j.intake_offset
FROM jobs j
JOIN unnest($1::text[], $2::text[]) AS k(tenant, job_id)
  ON j.tenant = k.tenant AND j.job_id = k.job_id
ORDER BY j.tenant, j.job_id
FOR UPDATE OF j

-- jobs_stage_create --
-- The per-connection staging table a batch's changed jobs are copied into (binary COPY of
-- store._row_tuple's rows, in this column order: the one list of these columns) before
-- `jobs_write_batch` moves them into `jobs`.
-- COPY costs Postgres and us far less than parsing one big JSON text into records did; a temp
-- table is private to the connection, so concurrent batches never see each other's rows, and
-- ON COMMIT DELETE ROWS empties it at the end of every batch (a rollback does too).
CREATE TEMP TABLE IF NOT EXISTS jobs_stage (
    tenant text, job_id text, shard_id integer, kind text, schedule text, run_at bigint,
    timezone text, handler text, target jsonb, payload jsonb, priority text,
    max_attempts integer, backoff_base_ms bigint, backoff_cap_ms bigint, timeout_ms bigint,
    misfire_policy text, misfire_grace_ms bigint, misfire_max_catchup integer,
    overlap_policy text, dst_gap text, dst_overlap text, status text, next_run_at bigint,
    version bigint, document jsonb, intake_partition integer, intake_offset bigint,
    expected_version bigint, start_at bigint, end_at bigint, after_end text,
    pause_after_dead_runs integer, max_runs integer, calendars text[], jitter_ms integer
) ON COMMIT DELETE ROWS

-- jobs_write_batch --
-- Write each changed job of `jobs_stage` once: existing rows are updated (their lock is held,
-- so the version we read is still theirs), new rows are inserted unless a concurrent writer
-- created the same job first — then that row is missing from the count and the caller retries
-- the batch.
WITH updated AS (
    UPDATE jobs j SET
        shard_id = r.shard_id, kind = r.kind, schedule = r.schedule,
        run_at = 'epoch'::timestamptz + r.run_at * interval '1 millisecond',
        timezone = r.timezone, handler = r.handler, target = r.target, payload = r.payload,
        priority = r.priority, max_attempts = r.max_attempts,
        backoff_base_ms = r.backoff_base_ms, backoff_cap_ms = r.backoff_cap_ms,
        timeout_ms = r.timeout_ms, misfire_policy = r.misfire_policy,
        misfire_grace_ms = r.misfire_grace_ms, misfire_max_catchup = r.misfire_max_catchup,
        overlap_policy = r.overlap_policy, dst_gap = r.dst_gap, dst_overlap = r.dst_overlap,
        status = r.status,
        next_run_at = 'epoch'::timestamptz + r.next_run_at * interval '1 millisecond',
        version = r.version, document = r.document,
        intake_partition = r.intake_partition, intake_offset = r.intake_offset,
        start_at = 'epoch'::timestamptz + r.start_at * interval '1 millisecond',
        end_at = 'epoch'::timestamptz + r.end_at * interval '1 millisecond',
        after_end = r.after_end, pause_after_dead_runs = r.pause_after_dead_runs,
        max_runs = r.max_runs, calendars = r.calendars, jitter_ms = r.jitter_ms,
        -- max_runs counts from the job's next occurrence, past every run it has already (its
        -- leader writes where it stands later, so next_run_at may lag its claims), when a
        -- deleted job is registered again (a new job) and when a job gets max_runs: runs
        -- before then are not the limit's.
        runs_done = CASE WHEN j.status = 'deleted' OR (j.max_runs IS NULL AND r.max_runs IS NOT NULL)
                         THEN 0 ELSE j.runs_done END,
        counted_through = CASE WHEN j.status = 'deleted'
                                    OR (j.max_runs IS NULL AND r.max_runs IS NOT NULL)
                               THEN greatest(
                                   'epoch'::timestamptz + r.next_run_at * interval '1 millisecond',
                                   (SELECT max(x.scheduled_at) + interval '1 millisecond'
                                    FROM job_runs x
                                    WHERE x.tenant = j.tenant AND x.job_id = j.job_id))
                               ELSE j.counted_through END
    FROM jobs_stage r
    WHERE r.expected_version IS NOT NULL
      AND j.tenant = r.tenant AND j.job_id = r.job_id AND j.version = r.expected_version
    RETURNING j.tenant, j.job_id
), inserted AS (
    INSERT INTO jobs (tenant, job_id, shard_id, kind, schedule, run_at, timezone, handler,
                      target, payload, priority, max_attempts, backoff_base_ms, backoff_cap_ms,
                      timeout_ms, misfire_policy, misfire_grace_ms, misfire_max_catchup,
                      overlap_policy, dst_gap, dst_overlap, status, next_run_at, version,
                      document, intake_partition, intake_offset, start_at, end_at, after_end,
                      pause_after_dead_runs, max_runs, counted_through, calendars, jitter_ms)
    SELECT r.tenant, r.job_id, r.shard_id, r.kind, r.schedule,
           'epoch'::timestamptz + r.run_at * interval '1 millisecond',
           r.timezone, r.handler, r.target, r.payload, r.priority, r.max_attempts,
           r.backoff_base_ms, r.backoff_cap_ms, r.timeout_ms, r.misfire_policy,
           r.misfire_grace_ms, r.misfire_max_catchup, r.overlap_policy, r.dst_gap,
           r.dst_overlap, r.status,
           'epoch'::timestamptz + r.next_run_at * interval '1 millisecond',
           r.version, r.document, r.intake_partition, r.intake_offset,
           'epoch'::timestamptz + r.start_at * interval '1 millisecond',
           'epoch'::timestamptz + r.end_at * interval '1 millisecond',
           r.after_end, r.pause_after_dead_runs, r.max_runs,
           -- max_runs counts from the job's first occurrence, the registry's own instant
           CASE WHEN r.max_runs IS NOT NULL
                THEN greatest(
                    'epoch'::timestamptz + r.next_run_at * interval '1 millisecond',
                    (SELECT max(x.scheduled_at) + interval '1 millisecond' FROM job_runs x
                     WHERE x.tenant = r.tenant AND x.job_id = r.job_id)) END,
           r.calendars, r.jitter_ms
    FROM jobs_stage r
    WHERE r.expected_version IS NULL
    ON CONFLICT (tenant, job_id) DO NOTHING
    RETURNING tenant, job_id
)
-- Only the number of rows written is needed: sending back 2,000 keys cost more than this.
-- The change feed's wake-up hint (docs/CHANGE_FEED.md): NOTIFY tickwheel_jobs '<shard>' once
-- per shard the batch writes, delivered at commit (Postgres folds repeats in a transaction).
SELECT (SELECT count(*) FROM updated) + (SELECT count(*) FROM inserted) AS written,
       (SELECT count(*) FROM (SELECT pg_notify('tickwheel_jobs', s.shard_id::text)
                              FROM (SELECT DISTINCT shard_id FROM jobs_stage) s) n) AS notified

-- health_check --
SELECT 1

-- job_get --
-- A job, with its pause note when the note is its current version's (migration 0016).
SELECT j.tenant, j.job_id, j.document, j.status, j.version, j.shard_id,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.created_at, j.updated_at, n.paused_by, n.reason AS pause_reason, n.paused_at
FROM jobs j
LEFT JOIN job_pause_notes n
  ON n.tenant = j.tenant AND n.job_id = j.job_id AND n.version = j.version
WHERE j.tenant = $1 AND j.job_id = $2 AND j.status <> 'deleted'

-- jobs_list --
-- One page of a tenant's jobs in id order, after the cursor (the last id of the previous page).
SELECT j.tenant, j.job_id, j.document, j.status, j.version, j.shard_id,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.created_at, j.updated_at, n.paused_by, n.reason AS pause_reason, n.paused_at
FROM jobs j
LEFT JOIN job_pause_notes n
  ON n.tenant = j.tenant AND n.job_id = j.job_id AND n.version = j.version
WHERE j.tenant = $1
  AND j.job_id > coalesce($2::text, '')
  AND (CASE WHEN $3::text IS NULL THEN j.status <> 'deleted' ELSE j.status = $3::text END)
  AND ($4::text IS NULL OR j.priority = $4::text)
  AND ($5::text IS NULL OR j.kind = $5::text)
ORDER BY j.job_id
LIMIT $6

-- job_runs_page --
-- One page of a job's runs, newest first, before the cursor (scheduled_at in ms).
SELECT tenant, job_id,
       (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_at,
       status, attempt, started_at, finished_at, last_error, skip_reason, origin
FROM job_runs
WHERE tenant = $1 AND job_id = $2
  AND ($3::bigint IS NULL
       OR scheduled_at < 'epoch'::timestamptz + $3::bigint * interval '1 millisecond')
-- The table's column (a plain `scheduled_at` here names the output's milliseconds): the
-- primary key (tenant, job_id, scheduled_at) then yields the newest first and the LIMIT stops
-- the read, where a sort read every run of the job.
ORDER BY job_runs.scheduled_at DESC
LIMIT $4

-- tenant_insert --
INSERT INTO tenants (name) VALUES ($1)

-- api_key_insert --
INSERT INTO api_keys (key_hash, prefix, tenant) VALUES ($1, $2, $3)

-- tenant_by_key --
SELECT k.tenant FROM api_keys k WHERE k.key_hash = $1 AND k.revoked_at IS NULL

-- tenants_existing --
SELECT name FROM tenants WHERE name = ANY($1::text[])

-- api_keys_active_by_prefixes --
-- The active keys the printed prefixes name: `tickwheel tenant revoke-key`, and the keys that
-- signed registrations name (registry_api/intake.py).
SELECT key_hash, prefix, tenant FROM api_keys WHERE prefix = ANY($1::text[]) AND revoked_at IS NULL

-- api_key_revoke --
-- Revoke one key by its hash; returns it when it was active.
UPDATE api_keys SET revoked_at = now()
WHERE key_hash = $1 AND revoked_at IS NULL
RETURNING prefix, tenant

-- registration_ids_remember --
-- Remember the message ids of a batch's signed registrations (migration 0010) and answer,
-- for each, where it was first received: the caller's own position for a new id or a
-- redelivery, another position for a replay. ON CONFLICT DO UPDATE (a no-op) rather than DO
-- NOTHING: it waits for a concurrent intake inserting the same id and then returns that row,
-- so two copies received at once on two partitions still tell each other apart. The caller
-- gives each (tenant, id) once per statement.
INSERT INTO registration_ids (tenant, message_id, source_topic, source_partition,
                              source_offset, signed_at, expires_at)
SELECT g.tenant, g.message_id, $3, g.source_partition, g.source_offset,
       'epoch'::timestamptz + g.signed_ms * interval '1 millisecond',
       'epoch'::timestamptz + g.signed_ms * interval '1 millisecond'
           + $7::bigint * interval '1 millisecond'
FROM unnest($1::text[], $2::text[], $4::integer[], $5::bigint[], $6::bigint[])
     AS g(tenant, message_id, source_partition, source_offset, signed_ms)
ON CONFLICT (tenant, message_id) DO UPDATE SET message_id = registration_ids.message_id
RETURNING tenant, message_id, source_topic, source_partition, source_offset

-- tenant_quotas_lock --
-- The quotas of a batch's tenants that have any (registry_api/quotas.py), with their state,
-- locked until the batch's transaction ends: in tenant order, so two batches never wait for
-- each other in a cycle. The database's clock (unix microseconds) is the one every registry
-- process shares. Tenants without a quota are not locked here: the batch's last statement
-- (`tenant_usage_write`) moves their job counters just before commit.
SELECT u.tenant, t.max_jobs, t.max_registrations_per_s, t.registrations_burst, u.jobs,
       u.registrations_tat_us,
       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us
FROM tenant_usage u
JOIN tenants t ON t.name = u.tenant
WHERE u.tenant = ANY($1::text[])
  AND (t.max_jobs IS NOT NULL OR t.max_registrations_per_s IS NOT NULL)
ORDER BY u.tenant
FOR UPDATE OF u

-- tenant_usage_write --
-- What a batch changed of its tenants' quota state, in one statement: each job counter moved
-- by the batch's change, each rate's new theoretical arrival time (NULL: unchanged). The rows
-- are locked in tenant order first (a materialised CTE is computed before the update reads
-- it); the quota tenants' rows are this transaction's already.
WITH locked AS MATERIALIZED (
    SELECT u.tenant FROM tenant_usage u
    WHERE u.tenant = ANY($1::text[])
    ORDER BY u.tenant
    FOR UPDATE
)
UPDATE tenant_usage u
SET jobs = u.jobs + d.jobs_delta,
    registrations_tat_us = coalesce(d.tat_us, u.registrations_tat_us)
FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS d(tenant, jobs_delta, tat_us)
WHERE u.tenant = d.tenant AND u.tenant IN (SELECT tenant FROM locked)

-- tenant_quota_row --
-- One tenant's quotas, its row locked to change them (`tickwheel tenant quota`).
SELECT name, max_jobs, max_registrations_per_s, registrations_burst
FROM tenants WHERE name = $1
FOR UPDATE

-- tenant_quota_set --
UPDATE tenants SET max_jobs = $2, max_registrations_per_s = $3, registrations_burst = $4
WHERE name = $1

-- tenant_usage_lock --
-- The tenant's counter row, locked before `tenant_jobs_recount` counts: that statement's
-- snapshot then sees every batch that changed the counter before us.
SELECT jobs FROM tenant_usage WHERE tenant = $1 FOR UPDATE

-- tenant_jobs_recount --
-- Set a tenant's job counter to the truth, when its job quota is set: writers that bypass the
-- registry (a manual insert, the benchmark's bulk load) do not move the counter.
UPDATE tenant_usage u
SET jobs = (SELECT count(*) FROM jobs j WHERE j.tenant = u.tenant AND j.status <> 'deleted')
WHERE u.tenant = $1
RETURNING jobs

-- tenant_set_max_running --
-- `tickwheel tenant cap`: a tenant's cap on its runs running at once (NULL: none). Workers
-- read it within a few seconds (workers/tenant_caps.py). No row back: no such tenant.
-- $1 tenant, $2 max_running or NULL
UPDATE tenants SET max_running = $2::integer WHERE name = $1::text RETURNING name, max_running

-- tenants_list --
-- Tenants with their quotas, registered jobs, active keys and cap (`tickwheel tenant ls`); one
-- tenant when $1 names it. For a capped tenant, its runs running now across the cluster (the
-- runs claimed under the cap, index job_runs_capped_running); $2 'running'.
SELECT t.name, t.created_at, t.max_jobs, t.max_registrations_per_s, t.registrations_burst,
       coalesce(u.jobs, 0) AS jobs,
       (SELECT count(*) FROM api_keys k WHERE k.tenant = t.name AND k.revoked_at IS NULL)
           AS active_keys,
       t.max_running,
       CASE WHEN t.max_running IS NOT NULL THEN
           (SELECT count(*) FROM job_runs r
            WHERE r.tenant = t.name AND r.cap_tracked AND r.status = $2::text)
       END AS running
FROM tenants t
LEFT JOIN tenant_usage u ON u.tenant = t.name
WHERE $1::text IS NULL OR t.name = $1
ORDER BY t.name


-- auto_pause_due --
-- Pause on failure (registry_api/auto_pause.py): the active jobs with `pause_after_dead_runs`
-- N of which a run died after $1 (index job_runs_dead), and whose N latest finished runs
-- scheduled since the job's last change (`updated_at`: an edit or a resume starts the count
-- over) all died. One row per such job with its latest dead run's instant.
--   $1 since, unix ms
SELECT j.tenant, j.job_id, j.version, j.pause_after_dead_runs AS n,
       (extract(epoch FROM d.last_dead) * 1000)::bigint AS last_dead_ms
FROM (SELECT r.tenant, r.job_id, max(r.scheduled_at) AS last_dead
      FROM job_runs r
      WHERE r.status = 'dead'
        AND r.finished_at > 'epoch'::timestamptz + $1::bigint * interval '1 millisecond'
      GROUP BY r.tenant, r.job_id) d
JOIN jobs j ON j.tenant = d.tenant AND j.job_id = d.job_id
WHERE j.pause_after_dead_runs IS NOT NULL AND j.status = 'active'
  AND (SELECT count(*) FILTER (WHERE f.status = 'dead')
       FROM (SELECT r.status FROM job_runs r
             WHERE r.tenant = j.tenant AND r.job_id = j.job_id
               AND r.scheduled_at >= j.updated_at AND r.status IN ('succeeded', 'dead')
             ORDER BY r.scheduled_at DESC
             LIMIT j.pause_after_dead_runs) f) = j.pause_after_dead_runs
ORDER BY j.tenant, j.job_id

-- job_runs_done --
-- A job's counted runs (max_runs, migration 0020): what the row counted plus its scheduled runs
-- (not skipped) since; for the preview's runs left.
SELECT j.runs_done + (SELECT count(*) FROM job_runs r
                      WHERE r.tenant = j.tenant AND r.job_id = j.job_id
                        AND r.scheduled_at >= coalesce(j.counted_through, j.created_at)
                        AND r.origin = 'schedule' AND r.status <> 'skipped') AS done
FROM jobs j WHERE j.tenant = $1 AND j.job_id = $2

-- calendars_lock_named --
-- The calendars a batch's jobs name that exist (migration 0021), share-locked until the batch
-- commits: a calendar's delete (`calendar_lock`, FOR UPDATE) waits, then sees the jobs.
SELECT c.tenant, c.name
FROM calendars c
JOIN unnest($1::text[], $2::text[]) AS k(tenant, name) ON c.tenant = k.tenant AND c.name = k.name
WHERE c.document IS NOT NULL
ORDER BY c.tenant, c.name
FOR SHARE OF c

-- calendar_lock --
-- A calendar's row (deleted ones too), locked for its write (registry_api/calendars.py).
SELECT c.version, c.document::text AS document, c.intake_partition, c.intake_offset,
       c.updated_at
FROM calendars c WHERE c.tenant = $1 AND c.name = $2
FOR UPDATE

-- calendars_tenant_lock --
-- The tenant's row, locked before a new calendar is counted (FOR NO KEY UPDATE: a job's insert,
-- whose foreign key share-locks the row, does not wait for it), so two creations in a race
-- cannot both take the last place. The count is a statement of its own
-- (`calendars_count`): one in this statement would read a snapshot taken before the wait.
SELECT 1 FROM tenants t WHERE t.name = $1 FOR NO KEY UPDATE OF t

-- calendars_count --
SELECT count(*) FROM calendars c WHERE c.tenant = $1 AND c.document IS NOT NULL

-- calendar_write --
-- Create, replace or delete (document NULL) a calendar; every write moves its version on and
-- its change_xid, which the scheduler processes' poll reads (`calendars_changed_since`).
INSERT INTO calendars AS c (tenant, name, document, intake_partition, intake_offset)
VALUES ($1, $2, $3::jsonb, $4, $5)
ON CONFLICT (tenant, name) DO UPDATE
SET version = c.version + 1, document = EXCLUDED.document, change_xid = pg_current_xact_id(),
    -- An HTTP or CLI write keeps the last Kafka position: a redelivered older registration
    -- is still a replay after it (as jobs keep theirs).
    intake_partition = coalesce(EXCLUDED.intake_partition, c.intake_partition),
    intake_offset = CASE WHEN EXCLUDED.intake_partition IS NULL THEN c.intake_offset
                         ELSE EXCLUDED.intake_offset END,
    updated_at = now()
RETURNING c.version, c.document::text AS document, c.updated_at

-- calendar_jobs --
-- The jobs, not deleted, that name a calendar (index jobs_calendars).
SELECT j.job_id FROM jobs j
WHERE j.calendars @> ARRAY[$2::text] AND j.tenant = $1 AND j.status <> 'deleted'
ORDER BY j.job_id
LIMIT $3

-- calendar_get --
SELECT c.version, c.document::text AS document, c.updated_at
FROM calendars c WHERE c.tenant = $1 AND c.name = $2 AND c.document IS NOT NULL

-- calendars_list --
SELECT c.name, c.version, c.document::text AS document, c.updated_at
FROM calendars c WHERE c.tenant = $1 AND c.document IS NOT NULL
ORDER BY c.name

-- calendars_named --
-- Those of some names that are the tenant's calendars (a job's preview).
SELECT c.name, c.document::text AS document
FROM calendars c
WHERE c.tenant = $1 AND c.name = ANY ($2::text[]) AND c.document IS NOT NULL
