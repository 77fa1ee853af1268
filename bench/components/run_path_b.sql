-- Design B's hot statements (docs/journal/run-path.md, *Design B*), CANDIDATES measured by
-- bench/components/statements_b.py on the tables of run_path_b_schema.sql. Loaded by that
-- harness only (tickwheel/sql/*.sql is what the system loads). Batches arrive as in
-- tickwheel/sql/shards.sql and workers.sql: identifiers and numbers as one comma-joined text
-- each, split here ('n' for NULL; tickwheel/db.py says why), free text as a text[].

-- b_claim --
-- The leader's claim in design B (I1-I3): fence, read each due job by its key, insert the
-- runs' claim rows. Nothing else is written: not the job's row, no lock on it.
--   fence   as `claim_due`'s (I2): each leader's `shard_leaders` row share-locked if it still
--           holds the epoch and owner the leader passed; only runs of shards it locked are
--           inserted. A takeover then waits for this statement's commit. For each shard whose
--           fence failed, one row with a NULL tenant, the owner and epoch its row holds, and
--           the shard (the caller raises FencedOut for that leader).
--   due     each run's job read by its primary key, without a lock (MVCC gives the version
--           committed before the statement: a registry batch holding the row delays nothing);
--           the job must still be active at the version the wheel loaded (I3), in the shard
--           the run is claimed for. The read is a LATERAL subquery with OFFSET 0, so that no
--           plan but one primary-key probe per run can serve it, under any statistics and any
--           session settings: joined plainly, the planner may hash-join a batch of 5,000 with
--           a scan of the whole table (bench/floor.py `floor_connection`, session 23).
--   inserted  the claim rows; ON CONFLICT DO NOTHING makes a repeated claim of an instant a
--           no-op (the run key is the primary key). The lease covers publishing and running:
--           now + $5 + the job's timeout (I4).
-- Returns, as `claim_due` does and for the same reason (no join of two CTEs, which carry no
-- statistics: the caller pairs rows by key), one row per due run whose job still matched
-- (scheduled_at NULL) with what its envelope needs, one row per run inserted (the job's
-- columns NULL) — only those are published — and the fenced-out rows; the last column is
-- the shard.
--   per leader: $1 shard  $2 epoch (its runs')  $3 $4 the fence: epoch and owner  $5 the lease
--   beyond the job's timeout, ms
--   per run: $6 shard  $7 tenant  $8 job_id  $9 the job version the wheel loaded
--   $10 scheduled ms  $11 the job's following occurrence ms (cron; 'n': none)
WITH leaders AS (
    SELECT l.shard, l.epoch, l.fence_epoch, l.owner
    FROM unnest(string_to_array($1::text, ',')::integer[], string_to_array($2::text, ',')::bigint[],
                string_to_array($3::text, ',')::bigint[], $4::text[])
         AS l(shard, epoch, fence_epoch, owner)
), fence AS MATERIALIZED (
    SELECT l.shard, l.epoch FROM shard_leaders s
    JOIN leaders l ON s.shard_id = l.shard AND s.epoch = l.fence_epoch AND s.owner = l.owner
    FOR SHARE OF s
), due AS MATERIALIZED (
    SELECT j.tenant, j.job_id, c.ms, c.next_ms, c.shard, f.epoch, j.version, j.priority,
           j.max_attempts, j.handler, j.target, j.payload, j.timeout_ms
    FROM unnest(string_to_array($6::text, ',')::integer[], string_to_array($7::text, ','),
                string_to_array($8::text, ','), string_to_array($9::text, ',')::bigint[],
                string_to_array($10::text, ',')::bigint[],
                string_to_array($11::text, ',', 'n')::bigint[])
         AS c(shard, tenant, job_id, version, ms, next_ms)
    JOIN fence f ON f.shard = c.shard
    CROSS JOIN LATERAL (
        SELECT j.tenant, j.job_id, j.version, j.priority, j.max_attempts, j.handler, j.target,
               j.payload, j.timeout_ms
        FROM jobs j
        -- `+ 0`: the shard is checked, never searched by (jobs_due's key, as in claim_due).
        WHERE j.tenant = c.tenant AND j.job_id = c.job_id
          AND j.shard_id + 0 = c.shard AND j.status = 'active' AND j.version = c.version
        OFFSET 0
    ) j
), inserted AS (
    INSERT INTO run_claims (tenant, job_id, scheduled_at, shard_id, epoch, job_version, attempt,
                            max_attempts, origin, lease_until, next_at)
    SELECT d.tenant, d.job_id, 'epoch'::timestamptz + d.ms * interval '1 millisecond', d.shard,
           d.epoch, d.version, 1, d.max_attempts, 'schedule',
           now() + ($5::bigint + d.timeout_ms) * interval '1 millisecond',
           'epoch'::timestamptz + d.next_ms * interval '1 millisecond'
    FROM due d
    ON CONFLICT DO NOTHING
    RETURNING tenant, job_id, scheduled_at, shard_id
)
SELECT d.tenant, d.job_id, NULL::bigint AS scheduled_at,
       d.priority, d.handler, d.target::text AS target, d.payload::text AS payload,
       d.timeout_ms, d.shard
FROM due d
UNION ALL
SELECT i.tenant, i.job_id, (extract(epoch FROM i.scheduled_at) * 1000)::bigint,
       NULL, NULL, NULL, NULL, NULL, i.shard_id
FROM inserted i
UNION ALL
SELECT NULL, s.owner, s.epoch, NULL, NULL, NULL, NULL, NULL, l.shard
FROM leaders l LEFT JOIN shard_leaders s ON s.shard_id = l.shard
WHERE NOT EXISTS (SELECT FROM fence f WHERE f.shard = l.shard)

-- b_open_runs --
-- The worker's check before it runs deliveries (DESIGN I4 as rewritten: "it first checks, by
-- a batched read, that the run is still open at the delivered attempt"), a read, no write: the
-- deliveries whose run is claimed and open at their attempt — no outcome at that attempt or a
-- later one, and for attempt n > 1 a `retrying` outcome of attempt n - 1 — with the attempt
-- budget. A delivery missing from the answer is a duplicate or stale: skipped. Not one of
-- run-path.md's two statements (its §3.2 has the worker run without a read); measured apart,
-- so that its cost is counted where DESIGN puts it.
--   $1 tenants  $2 job ids  $3 scheduled ms  $4 attempts
SELECT w.tenant, w.job_id, w.scheduled_ms, w.attempt, c.max_attempts
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[])
     AS w(tenant, job_id, scheduled_ms, attempt)
JOIN run_claims c
  ON c.tenant = w.tenant AND c.job_id = w.job_id
 AND c.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
WHERE NOT EXISTS (
        SELECT FROM run_outcomes o
        WHERE o.tenant = c.tenant AND o.job_id = c.job_id AND o.scheduled_at = c.scheduled_at
          AND o.attempt >= w.attempt)
  AND (w.attempt = 1 OR EXISTS (
        SELECT FROM run_outcomes o
        WHERE o.tenant = c.tenant AND o.job_id = c.job_id AND o.scheduled_at = c.scheduled_at
          AND o.attempt = w.attempt - 1 AND o.status = 'retrying'))

-- b_outcomes --
-- The worker's one write in design B (I4, I5): the results of finished attempts, inserted,
-- fenced by nothing but the key (run key + attempt): no read of the claim, no lock, no update.
-- A result whose (run, attempt) already has one is not written (ON CONFLICT DO NOTHING): a
-- duplicate execution's second result. Returns the results written.
--   $1 tenants  $2 job ids  $3 scheduled ms  $4 attempts  $5 statuses  $6 shards
--   $7 started ms (the worker's clock)  $8 retry delays ms ('n': none)  $9 errors (text[];
--   NULL when the batch has none)  $10 the worker's id
INSERT INTO run_outcomes (tenant, job_id, scheduled_at, attempt, status, shard_id, worker,
                          started_at, finished_at, retry_at, error)
SELECT w.tenant, w.job_id, 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond',
       w.attempt, w.status, w.shard, $10::text,
       'epoch'::timestamptz + w.started_ms * interval '1 millisecond', now(),
       now() + w.delay_ms * interval '1 millisecond', w.error
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
            string_to_array($5::text, ','), string_to_array($6::text, ',')::integer[],
            string_to_array($7::text, ',')::bigint[],
            string_to_array($8::text, ',', 'n')::bigint[], $9::text[])
     AS w(tenant, job_id, scheduled_ms, attempt, status, shard, started_ms, delay_ms, error)
ON CONFLICT DO NOTHING
RETURNING tenant, job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS scheduled_ms

-- b_analyze --
-- HARNESS ONLY: B's tables analysed after the jobs are registered, as `statements.py` analyses
-- job_runs (empty, both).
ANALYZE run_claims, run_outcomes

-- b_progress --
-- HARNESS ONLY: what the measured phases left, for their check.
SELECT (SELECT count(*) FROM run_claims) AS claimed,
       (SELECT count(*) FROM run_outcomes WHERE status = 'succeeded') AS completed

-- b_claims_of --
-- HARNESS ONLY (the --check): how many claim rows these jobs of tenant $1 have.
SELECT count(*) FROM run_claims WHERE tenant = $1 AND job_id = ANY($2::text[])

-- b_check_bump_version --
-- HARNESS ONLY (the --check): an edit as the registry makes it (a new version) of some jobs.
UPDATE jobs SET version = version + 1 WHERE tenant = $1 AND job_id = ANY($2::text[])

-- b_check_set_status --
-- HARNESS ONLY (the --check): a status changed WITHOUT a new version, which the registry never
-- writes, so that the claim's status check is tested apart from its version check.
UPDATE jobs SET status = $3 WHERE tenant = $1 AND job_id = ANY($2::text[])
