-- The workers' queries (workers/store.py). Runs are named by their run key's parts; instants
-- cross this boundary as integer milliseconds since the epoch, converted exactly with interval
-- arithmetic. Every write is fenced by the attempt the worker claimed (I4).
--
-- A batch's identifiers and numbers arrive as one text each, split here with string_to_array
-- ('n' is NULL; tickwheel/db.py says why); free text (errors) as a text[].
--
-- The statuses a statement matches arrive as a parameter ($8 of worker_claim, and so on), not
-- as literals. With literals the planner may read every run in flight through a partial index
-- whose predicate they imply (job_runs_lease, job_runs_overlap) and compare each with the
-- batch, and it does so whenever the day's partition was analysed while few runs were in
-- flight, which is the normal state when a burst starts (D-168). A parameter implies no index
-- predicate, so the batch's key lookups on the primary key stay the only cheap plan.

-- worker_claim --
-- I4, for many deliveries at once: pending/published → running with this worker and a lease,
-- only for the attempt the envelope dispatches. A delivery whose row is not returned is a
-- duplicate or a stale redelivery. The job's backoff comes along for the result decision.
-- `published_at` is recorded here, from the delivery's record timestamp (set when the leader
-- produced the envelope): the leader does not write the row again after the broker's ack
-- (docs/DECISIONS.md D-134).
-- For deliveries without a valid seal (tickwheel/run_seal.py; sealed ones take
-- `worker_claim_sealed`): what runs is the job's handler or target, payload and timeout as
-- stored now, returned here: such an envelope only names the run and its attempt, so one
-- produced by anyone but a scheduler cannot make a worker run content of its own
-- (docs/DECISIONS.md D-142). `timeout_ms` NULL (it is NOT NULL in jobs): the job's row is gone.
-- $1 tenants, $2 job ids, $3 scheduled_at ms, $4 attempts, $5 worker id, $6 lease ms,
-- $7 published ms (NULL: the record carried no timestamp), $8 the claimable statuses.
-- The columns come out in the order of workers/store.py `Claim`.
WITH wanted AS (
    SELECT w.tenant, w.job_id,
           'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond' AS scheduled_at,
           w.attempt,
           'epoch'::timestamptz + w.published_ms * interval '1 millisecond' AS published_at
    FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
                string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
                string_to_array($7::text, ',', 'n')::bigint[])
         AS w(tenant, job_id, scheduled_ms, attempt, published_ms)
), claimed AS (
    UPDATE job_runs r
    SET status = 'running', worker = $5::text, started_at = now(),
        lease_until = now() + $6::bigint * interval '1 millisecond',
        published_at = coalesce(w.published_at, r.published_at)
    FROM wanted w
    WHERE r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
      AND r.status = ANY ($8::text[]) AND r.attempt = w.attempt
      -- A pending run without a lease is held back by overlap buffer_one: no scheduler has
      -- sent it, so a message naming it must not start it (buffered_release leases it).
      AND r.lease_until IS NOT NULL
    RETURNING r.tenant, r.job_id, r.scheduled_at, r.attempt, r.max_attempts, r.started_at
)
SELECT c.tenant, c.job_id,
       (extract(epoch FROM c.scheduled_at) * 1000)::bigint AS scheduled_ms,
       c.attempt, c.max_attempts,
       (extract(epoch FROM c.started_at) * 1000)::bigint AS started_ms,
       coalesce(j.backoff_base_ms, 10000) AS backoff_base_ms,
       coalesce(j.backoff_cap_ms, 600000) AS backoff_cap_ms,
       j.handler, j.target::text AS target, j.payload::text AS payload, j.timeout_ms
FROM claimed c
LEFT JOIN jobs j ON j.tenant = c.tenant AND j.job_id = c.job_id

-- worker_claim_sealed --
-- `worker_claim` for deliveries whose seal opened (tickwheel/run_seal.py): what runs is the
-- envelope's content, which the leader built from the job's row in the transaction that created
-- the run, so the job's row is not read here — the claim is the run row's UPDATE alone (the
-- join cost a third of the claim's Postgres time, D-142). The job's backoff, needed
-- only by a failed attempt, is read then (`job_backoffs`). Same parameters as `worker_claim`;
-- the columns are its first six.
WITH wanted AS (
    SELECT w.tenant, w.job_id,
           'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond' AS scheduled_at,
           w.attempt,
           'epoch'::timestamptz + w.published_ms * interval '1 millisecond' AS published_at
    FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
                string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
                string_to_array($7::text, ',', 'n')::bigint[])
         AS w(tenant, job_id, scheduled_ms, attempt, published_ms)
)
UPDATE job_runs r
SET status = 'running', worker = $5::text, started_at = now(),
    lease_until = now() + $6::bigint * interval '1 millisecond',
    published_at = coalesce(w.published_at, r.published_at)
FROM wanted w
WHERE r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
  AND r.status = ANY ($8::text[]) AND r.attempt = w.attempt
  AND r.lease_until IS NOT NULL  -- as in worker_claim: a buffered run is not sent yet
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_ms,
          r.attempt, r.max_attempts, (extract(epoch FROM r.started_at) * 1000)::bigint AS started_ms

-- job_backoffs --
-- The retry backoff of some jobs (sealed claims' failed attempts); a job whose row is gone gets
-- the defaults, as `worker_claim` gives it. $1 tenants, $2 job ids.
SELECT k.tenant, k.job_id,
       coalesce(j.backoff_base_ms, 10000) AS backoff_base_ms,
       coalesce(j.backoff_cap_ms, 600000) AS backoff_cap_ms
FROM unnest($1::text[], $2::text[]) AS k(tenant, job_id)
LEFT JOIN jobs j ON j.tenant = k.tenant AND j.job_id = k.job_id

-- broken_worker_claim_ignores_lease --
-- TEST ONLY (tickwheel/broken.py, variant claim_ignores_lease): `worker_claim` with its guard
-- removed: a run already running under another worker's live lease is claimed again at the
-- same attempt. The chaos checker must catch the second execution this allows.
WITH wanted AS (
    SELECT w.tenant, w.job_id,
           'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond' AS scheduled_at,
           w.attempt,
           'epoch'::timestamptz + w.published_ms * interval '1 millisecond' AS published_at
    FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
                string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
                string_to_array($7::text, ',', 'n')::bigint[])
         AS w(tenant, job_id, scheduled_ms, attempt, published_ms)
), claimed AS (
    UPDATE job_runs r
    SET status = 'running', worker = $5::text, started_at = now(),
        lease_until = now() + $6::bigint * interval '1 millisecond',
        published_at = coalesce(w.published_at, r.published_at)
    FROM wanted w
    WHERE r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
      AND (r.status = ANY ($8::text[]) OR r.status = 'running') AND r.attempt = w.attempt
      AND r.lease_until IS NOT NULL
    RETURNING r.tenant, r.job_id, r.scheduled_at, r.attempt, r.max_attempts, r.started_at
)
SELECT c.tenant, c.job_id,
       (extract(epoch FROM c.scheduled_at) * 1000)::bigint AS scheduled_ms,
       c.attempt, c.max_attempts,
       (extract(epoch FROM c.started_at) * 1000)::bigint AS started_ms,
       coalesce(j.backoff_base_ms, 10000) AS backoff_base_ms,
       coalesce(j.backoff_cap_ms, 600000) AS backoff_cap_ms,
       j.handler, j.target::text AS target, j.payload::text AS payload, j.timeout_ms
FROM claimed c
LEFT JOIN jobs j ON j.tenant = c.tenant AND j.job_id = c.job_id

-- broken_worker_claim_sealed_ignores_lease --
-- TEST ONLY (tickwheel/broken.py, variant claim_ignores_lease): `worker_claim_sealed` with the
-- same guard removed as in `broken_worker_claim_ignores_lease`.
WITH wanted AS (
    SELECT w.tenant, w.job_id,
           'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond' AS scheduled_at,
           w.attempt,
           'epoch'::timestamptz + w.published_ms * interval '1 millisecond' AS published_at
    FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
                string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
                string_to_array($7::text, ',', 'n')::bigint[])
         AS w(tenant, job_id, scheduled_ms, attempt, published_ms)
)
UPDATE job_runs r
SET status = 'running', worker = $5::text, started_at = now(),
    lease_until = now() + $6::bigint * interval '1 millisecond',
    published_at = coalesce(w.published_at, r.published_at)
FROM wanted w
WHERE r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
  AND (r.status = ANY ($8::text[]) OR r.status = 'running') AND r.attempt = w.attempt
  AND r.lease_until IS NOT NULL
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_ms,
          r.attempt, r.max_attempts, (extract(epoch FROM r.started_at) * 1000)::bigint AS started_ms

-- worker_run_statuses --
-- Why deliveries claimed nothing: the row's status and attempt now (no row: an unknown run),
-- and whether overlap buffer_one holds it back (pending without a lease).
SELECT w.tenant, w.job_id, w.scheduled_ms, r.status, r.attempt,
       r.status = 'pending' AND r.lease_until IS NULL AS held
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS w(tenant, job_id, scheduled_ms)
JOIN job_runs r
  ON r.tenant = w.tenant AND r.job_id = w.job_id
 AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'

-- worker_heartbeat --
-- Extend the lease of the runs this worker is executing; a run fenced out meanwhile (its lease
-- lapsed and the scheduler moved it on) is not touched.
-- $1 tenants, $2 job ids, $3 scheduled_at ms, $4 attempts, $5 worker id, $6 lease ms,
-- $7 'running'
UPDATE job_runs r
SET lease_until = now() + $6::bigint * interval '1 millisecond'
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[])
     AS w(tenant, job_id, scheduled_ms, attempt)
WHERE r.tenant = w.tenant AND r.job_id = w.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
  AND r.attempt = w.attempt AND r.status = $7::text AND r.worker = $5::text

-- worker_mark_running --
-- A run this worker started without a claim (I4: a first delivery of a fresh claim runs without
-- a write) and still holds at a heartbeat, or holds while its partition is taken away: marked
-- `running` under this worker with a worker lease, so that it stays visible, a lapse of the
-- leader's lease does not re-dispatch it, and a redelivery's claim finds it taken. Fenced like a
-- claim: only at the delivered attempt, still dispatched (a row that moved on is not returned).
-- `started_at` is the database's clock less how long the run has been in hand.
-- $1 tenants, $2 job ids, $3 scheduled_at ms, $4 attempts, $5 worker id, $6 lease ms,
-- $7 published ms (NULL: the record carried no timestamp), $8 the claimable statuses,
-- $9 ms since each run started
UPDATE job_runs r
SET status = 'running', worker = $5::text,
    started_at = now() - w.ran_ms * interval '1 millisecond',
    lease_until = now() + $6::bigint * interval '1 millisecond',
    published_at = coalesce(r.published_at,
                            'epoch'::timestamptz + w.published_ms * interval '1 millisecond')
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
            string_to_array($7::text, ',', 'n')::bigint[],
            string_to_array($9::text, ',')::bigint[])
     AS w(tenant, job_id, scheduled_ms, attempt, published_ms, ran_ms)
WHERE r.tenant = w.tenant AND r.job_id = w.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
  AND r.status = ANY ($8::text[]) AND r.attempt = w.attempt AND r.lease_until IS NOT NULL
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_ms

-- run_retry_policies --
-- What a failed attempt of a run started without a claim needs for its decision: the run's
-- attempt budget and its job's backoff. A run without a row gets no budget limit (its result is
-- fenced out anyway); a job whose row is gone gets the default backoff.
-- $1 tenants, $2 job ids, $3 scheduled_at ms
SELECT k.tenant, k.job_id, k.scheduled_ms,
       coalesce(r.max_attempts, 2147483647) AS max_attempts,
       coalesce(j.backoff_base_ms, 10000) AS backoff_base_ms,
       coalesce(j.backoff_cap_ms, 600000) AS backoff_cap_ms
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(tenant, job_id, scheduled_ms)
LEFT JOIN job_runs r
  ON r.tenant = k.tenant AND r.job_id = k.job_id
 AND r.scheduled_at = 'epoch'::timestamptz + k.scheduled_ms * interval '1 millisecond'
LEFT JOIN jobs j ON j.tenant = k.tenant AND j.job_id = k.job_id

-- worker_results --
-- The results of finished attempts, the worker's one write of a run (I4): succeeded | retrying
-- (retry_at = now + delay) | dead, fenced by attempt and by the run still being this worker's
-- or still dispatched — `running` under this worker (a claimed or marked run), or claimable
-- with its lease (a run started without a claim). A run another worker claimed or marked
-- meanwhile, or one the leader moved on, is fenced out. A run that was not marked gets its
-- `started_at` here (the database's clock less how long ago it started), its worker and its
-- record's timestamp as `published_at`. Returns the runs written.
-- $1 tenants, $2 job ids, $3 scheduled_at ms, $4 attempts, $5 statuses, $6 retry delays ms,
-- $7 errors, $8 'running', $9 worker id, $10 the claimable statuses, $11 ms since each run
-- started, $12 published ms (NULL: none)
UPDATE job_runs r
SET status = w.status,
    finished_at = CASE WHEN w.status IN ('succeeded', 'dead') THEN now() END,
    retry_at = CASE WHEN w.status = 'retrying'
                    THEN now() + w.delay_ms * interval '1 millisecond' END,
    -- A success keeps the error of an earlier attempt: it tells that the run needed retries.
    last_error = CASE WHEN w.status = 'succeeded' THEN r.last_error ELSE w.error END,
    lease_until = NULL,
    worker = $9::text,
    started_at = CASE WHEN r.status = $8::text THEN r.started_at
                      ELSE now() - w.ran_ms * interval '1 millisecond' END,
    published_at = coalesce(r.published_at,
                            'epoch'::timestamptz + w.published_ms * interval '1 millisecond')
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
            string_to_array($5::text, ','), string_to_array($6::text, ',', 'n')::bigint[],
            $7::text[], string_to_array($11::text, ',')::bigint[],
            string_to_array($12::text, ',', 'n')::bigint[])
     AS w(tenant, job_id, scheduled_ms, attempt, status, delay_ms, error, ran_ms, published_ms)
WHERE r.tenant = w.tenant AND r.job_id = w.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond'
  AND r.attempt = w.attempt
  AND (r.status = $8::text AND r.worker = $9::text
       OR r.status = ANY ($10::text[]) AND r.lease_until IS NOT NULL)
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_ms
