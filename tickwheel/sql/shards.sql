-- The shard leaders' queries (shards/store.py). Times cross this boundary as integer
-- milliseconds since the epoch, converted exactly with interval arithmetic. Every write of a
-- leader runs in a transaction that first passes `shard_fence` (I2).

-- feed_position --
-- Step 1 of a change-feed poll (docs/CHANGE_FEED.md): the xmin of a snapshot taken before the
-- read below; the lower bound to pass to the next poll.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS since

-- jobs_changed_since --
-- Step 2: every job of the given shards written by a transaction not yet committed when the
-- previous poll's position was taken. Rows may repeat across polls; (job, version) identifies
-- a change. The columns are those of `horizon_jobs`: a row goes straight into a wheel.
SELECT j.tenant, j.job_id, j.shard_id, j.status, j.version,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.kind, j.schedule, j.timezone, j.dst_gap, j.dst_overlap, j.misfire_policy,
       j.misfire_grace_ms, j.misfire_max_catchup, j.overlap_policy,
       (extract(epoch FROM j.start_at) * 1000)::bigint AS start_ms,
       (extract(epoch FROM j.end_at) * 1000)::bigint AS end_ms, j.after_end, j.max_runs,
       j.calendars, j.jitter_ms,
       (extract(epoch FROM j.updated_at) * 1000)::bigint AS updated_at,
       j.change_xid::text AS change_xid
FROM jobs j
WHERE j.shard_id = ANY($1::integer[]) AND j.change_xid >= $2::text::xid8
ORDER BY j.change_xid

-- db_clock_ms --
-- The database's clock (not the transaction's start): what "never early" (I8) is measured by.
-- Floored, not rounded: a clock read half a millisecond ahead would be early.
SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms

-- shard_take_over --
-- A new leader's first write: bump the epoch under the row lock (an INSERT ... ON CONFLICT
-- UPDATE locks the row like FOR UPDATE), so every claim of the previous leader that has not
-- committed yet waits for us and then fails its fence. Also returns the previous owner: NULL
-- when that leader stepped down cleanly (every publish of its acknowledged), else its pending
-- runs are to be adopted (`outbox_adopt`).
-- (Every part of the statement sees the snapshot taken before it: `previous` reads the owner
-- as it was. A step-down racing the takeover may make us adopt needlessly: harmless.)
WITH previous AS (
    SELECT owner FROM shard_leaders WHERE shard_id = $1
), taken AS (
    INSERT INTO shard_leaders AS s (shard_id, epoch, owner, since)
    VALUES ($1, 1, $2, now())
    ON CONFLICT (shard_id) DO UPDATE SET epoch = s.epoch + 1, owner = EXCLUDED.owner, since = now()
    RETURNING epoch
)
SELECT taken.epoch, (SELECT owner FROM previous) AS previous_owner FROM taken

-- shard_end_blockers --
-- A takeover still waiting for the shard's row after its patience: the sessions it waits for
-- that belong to another scheduler process (`application_name`, set by `scheduler_app_name`)
-- are terminated. They hold the row for a leader the election has already replaced: one frozen
-- (SIGSTOP, a GC or VM pause) inside a transaction. Postgres's idle-in-transaction timeout
-- does not end them when the freeze caught the client between a statement's Parse and its
-- Sync (asyncpg prepares a new statement that way): the session counts as active. Their
-- transactions roll back, which is what the fence would make of their writes anyway.
-- Our own sessions are never ended: their name is compared as the server stores it (it cuts
-- a name at 63 bytes and replaces non-ASCII characters), read from the waiting session.
--   $1 the takeover's backend pid
SELECT a.pid, a.application_name, pg_terminate_backend(a.pid) AS ended
FROM pg_stat_activity a
WHERE a.pid = ANY(pg_blocking_pids($1))
  AND a.application_name LIKE 'tickwheel-scheduler/%'
  AND a.application_name <> (SELECT w.application_name FROM pg_stat_activity w WHERE w.pid = $1)

-- shard_fence --
-- First statement of every leader transaction: the shard's row, share-locked until commit, so
-- no takeover can commit in between. The caller goes on only if epoch and owner are its own.
SELECT epoch, owner FROM shard_leaders WHERE shard_id = $1 FOR SHARE

-- shard_step_down --
-- A leader that leaves on purpose (rebalance, shutdown) with every publish acknowledged clears
-- the owner if it is still its: its successor then has no pending runs to adopt.
UPDATE shard_leaders SET owner = NULL WHERE shard_id = $1 AND epoch = $2 AND owner = $3

-- horizon_jobs --
-- A shard's active jobs due in [$2, $3) (index jobs_due, a range of it): the whole horizon
-- ($2 = 0, at takeover and the full reload) or the slice of time its extension newly covers.
-- `claimed_through`: for a job already due, the latest occurrence a claim created from its
-- `next_run_at` on (a probe of the run key's index, backwards; NULL: none) — its leader claims
-- without writing the job's row, and a position not written yet when that leader went is
-- derived from the runs here (D-269).
SELECT j.tenant, j.job_id, j.shard_id, j.status, j.version,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.kind, j.schedule, j.timezone, j.dst_gap, j.dst_overlap, j.misfire_policy,
       j.misfire_grace_ms, j.misfire_max_catchup, j.overlap_policy,
       (extract(epoch FROM j.start_at) * 1000)::bigint AS start_ms,
       (extract(epoch FROM j.end_at) * 1000)::bigint AS end_ms, j.after_end, j.max_runs,
       j.calendars, j.jitter_ms,
       (SELECT (extract(epoch FROM r.scheduled_at) * 1000)::bigint FROM job_runs r
        WHERE j.next_run_at <= now() AND r.tenant = j.tenant AND r.job_id = j.job_id
          AND r.scheduled_at >= j.next_run_at AND r.origin = 'schedule'
        ORDER BY r.scheduled_at DESC LIMIT 1) AS claimed_through
FROM jobs j
WHERE j.shard_id = $1 AND j.status = 'active'
  AND j.next_run_at >= 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'
  AND j.next_run_at < 'epoch'::timestamptz + $3::bigint * interval '1 millisecond'

-- horizon_versions --
-- The full reload's first read (shards/leader.py `_resync`, the safety net): a shard's active
-- jobs due before $2, each only as its (version, next_run_at). The leader reads in full
-- (`jobs_by_keys`) only the jobs whose pair its wheel does not already hold, instead of
-- decoding every loaded job again on the event loop all leaders share (D-115). Postgres still
-- visits every row of the horizon.
SELECT j.tenant, j.job_id, j.version,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at
FROM jobs j
WHERE j.shard_id = $1 AND j.status = 'active'
  AND j.next_run_at < 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'

-- jobs_by_keys --
-- The current rows of some jobs (wheel entries a claim found stale), in the horizon's shape.
SELECT j.tenant, j.job_id, j.shard_id, j.status, j.version,
       (extract(epoch FROM j.next_run_at) * 1000)::bigint AS next_run_at,
       j.kind, j.schedule, j.timezone, j.dst_gap, j.dst_overlap, j.misfire_policy,
       j.misfire_grace_ms, j.misfire_max_catchup, j.overlap_policy,
       (extract(epoch FROM j.start_at) * 1000)::bigint AS start_ms,
       (extract(epoch FROM j.end_at) * 1000)::bigint AS end_ms, j.after_end, j.max_runs,
       j.calendars, j.jitter_ms
FROM jobs j
JOIN unnest($1::text[], $2::text[]) AS k(tenant, job_id)
  ON j.tenant = k.tenant AND j.job_id = k.job_id

-- horizon_retries --
-- The shard's retrying runs due before $2 (index job_runs_retry): they go out through the wheel.
-- Attempt 0: a trigger or backfill never dispatched yet (its first claim applies overlap).
-- retry_at is written with microseconds (now() + delay): it is rounded UP to the millisecond
-- (never early, I8), and the claims below compare that same rounding; comparing the rounded
-- value with the stored timestamp would never match and leave the run retrying forever.
SELECT r.tenant, r.job_id,
       (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
       ceil(extract(epoch FROM r.retry_at) * 1000)::bigint AS retry_at, r.attempt
FROM job_runs r
WHERE r.shard_id = $1 AND r.status = 'retrying'
  AND r.retry_at < 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'

-- window_unstarted --
-- The dispatch window (shards/window.py): per tenant of $1, its runs claimed
-- and not finished nor marked running, cluster-wide — pending with a publish lease (a buffered
-- run, without one, is not out).
-- One probe of job_runs_lease per shard of $2 (every shard): the runs in flight only. Written
-- as a loop over the shards so that no plan but that index can serve it: as one scan, a day
-- partition analysed while its runs were pending had the planner read every run of the
-- tenant by the primary key instead (D-119).
SELECT r.tenant, count(*)::integer AS unstarted
FROM unnest($2::integer[]) AS s(shard)
CROSS JOIN LATERAL (
    SELECT j.tenant FROM job_runs j
    WHERE j.shard_id = s.shard AND j.status = 'pending' AND j.lease_until IS NOT NULL
      AND j.tenant = ANY ($1::text[])
) r
GROUP BY r.tenant

-- runs_in_flight --
-- Per job, its runs in flight (domain.IN_FLIGHT; those created while the job had an overlap
-- policy, `overlap_tracked`, index job_runs_overlap), split into buffered ones (pending without a
-- lease: held back by overlap buffer_one) and the others, for the overlap policies. A retrying
-- row at attempt 0 (a trigger or backfill not dispatched yet) occupies nothing until it goes.
SELECT r.tenant, r.job_id,
       count(*) FILTER (WHERE r.status = 'pending' AND r.lease_until IS NULL) AS buffered,
       count(*) FILTER (WHERE r.status <> 'pending' OR r.lease_until IS NOT NULL) AS running
FROM job_runs r
JOIN unnest($1::text[], $2::text[]) AS k(tenant, job_id)
  ON r.tenant = k.tenant AND r.job_id = k.job_id
WHERE r.overlap_tracked AND r.status IN ('pending', 'published', 'running', 'retrying')
  AND NOT (r.status = 'retrying' AND r.attempt = 0)
GROUP BY r.tenant, r.job_id

-- claim_due --
-- The claim (I3) of one or more leaders of a process at once (shards/claims.py combines the
-- claims its leaders make while another is under way): insert the run rows planned for the due
-- jobs whose row still holds what the wheel loaded — active, at the version it knew — and
-- nothing else: the job's row is read, not written or locked (where its schedule stands is the
-- leader's, written later in batches by `jobs_positions`; docs/DECISIONS.md D-269). The runs are
-- `pending` ones with a publish lease (attempt 1) or without one (buffered), `skipped` ones with
-- their reason; the run key makes a second claim of an instant a no-op. Returns one row per job
-- the claim found as the wheel knew it (scheduled_at NULL) with what its envelopes need, and one
-- row per pending run inserted (the job columns NULL); the last column is the job's shard.
-- The statement fences itself (I2), per shard, in place of `shard_fence` in a transaction of
-- its own: `fence` share-locks each shard's row that holds the epoch and owner its leader
-- passed — under READ COMMITTED a row a takeover changed after the snapshot is re-read when
-- locked and fails them — and only the jobs of shards it locked are claimed (`claimed` joins
-- it). A takeover then waits for this statement's commit, as for a fenced transaction's. For
-- each shard whose fence failed, one row has a NULL tenant, with the owner and epoch the
-- shard's row holds and the shard (the caller raises FencedOut for that leader; the other
-- leaders' claims stand).
--   per leader: $1 shard  $2 epoch (its runs')  $3 $4 the fence: epoch and owner (the lease's;
--   only the broken build `epoch_fence` passes what the shard's row holds)  $5 publish lease ms
--   jobs: $6 shard  $7 tenant  $8 job_id  $9 the version the wheel knew
--   runs: $10 tenant  $11 job_id  $12 scheduled ms  $13 status  $14 skip_reason  $15 leased
--   (each a batch: identifiers, numbers and flags as one comma-joined text, split here, 'n'
--   for NULL — asyncpg would encode arrays element by element, tickwheel/db.py; the owners and
--   skip reasons, free text, as a text[], the reasons NULL when the batch skips nothing)
WITH leaders AS (
    SELECT l.shard, l.epoch, l.fence_epoch, l.owner
    FROM unnest(string_to_array($1::text, ',')::integer[], string_to_array($2::text, ',')::bigint[],
                string_to_array($3::text, ',')::bigint[], $4::text[])
         AS l(shard, epoch, fence_epoch, owner)
), fence AS MATERIALIZED (
    SELECT l.shard, l.epoch FROM shard_leaders s
    JOIN leaders l ON s.shard_id = l.shard AND s.epoch = l.fence_epoch AND s.owner = l.owner
    FOR SHARE OF s
), claimed AS MATERIALIZED (
    SELECT j.tenant, j.job_id, j.shard_id, f.epoch, j.priority, j.max_attempts, j.handler,
           j.target::text AS target, j.payload::text AS payload, j.timeout_ms,
           j.overlap_policy
    FROM unnest(string_to_array($6::text, ',')::integer[], string_to_array($7::text, ','),
                string_to_array($8::text, ','), string_to_array($9::text, ',')::bigint[])
         AS c(shard, tenant, job_id, version)
    JOIN fence f ON f.shard = c.shard
    JOIN jobs j ON j.tenant = c.tenant AND j.job_id = c.job_id
    -- Each job is found by its primary key; shard and version are only checked (`+ 0`: a
    -- plain comparison let the planner probe another index of `jobs` instead, D-269).
    WHERE j.shard_id + 0 = c.shard AND j.status = 'active' AND j.version + 0 = c.version
), inserted AS (
    INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt,
                          epoch, lease_until, max_attempts, origin, skip_reason, finished_at,
                          overlap_tracked)
    SELECT r.tenant, r.job_id, 'epoch'::timestamptz + r.ms * interval '1 millisecond',
           c.shard_id, c.priority, r.status, CASE WHEN r.status = 'pending' THEN 1 ELSE 0 END,
           c.epoch, CASE WHEN r.leased THEN now() + $5::bigint * interval '1 millisecond' END,
           c.max_attempts, 'schedule', r.skip_reason,
           CASE WHEN r.status = 'skipped' THEN now() END, c.overlap_policy <> 'allow'
    FROM unnest(string_to_array($10::text, ','), string_to_array($11::text, ','),
                string_to_array($12::text, ',')::bigint[], string_to_array($13::text, ','),
                $14::text[], string_to_array($15::text, ',')::boolean[])
         AS r(tenant, job_id, ms, status, skip_reason, leased)
    JOIN claimed c ON c.tenant = r.tenant AND c.job_id = r.job_id
    ON CONFLICT DO NOTHING
    RETURNING tenant, job_id, scheduled_at, status, lease_until, shard_id
)
-- No join here: the CTEs carry no statistics, and the planner's nested loop over them cost
-- 25 million comparisons for 5,000 jobs. The caller pairs runs with their jobs by key.
SELECT c.tenant, c.job_id, NULL::bigint AS scheduled_at,
       c.priority, c.handler, c.target, c.payload, c.timeout_ms, c.shard_id AS shard
FROM claimed c
UNION ALL
SELECT i.tenant, i.job_id, (extract(epoch FROM i.scheduled_at) * 1000)::bigint,
       NULL, NULL, NULL, NULL, NULL, i.shard_id
FROM inserted i
WHERE i.status = 'pending' AND i.lease_until IS NOT NULL
UNION ALL
SELECT NULL, s.owner, s.epoch, NULL, NULL, NULL, NULL, NULL, l.shard
FROM leaders l LEFT JOIN shard_leaders s ON s.shard_id = l.shard
WHERE NOT EXISTS (SELECT FROM fence f WHERE f.shard = l.shard)

-- jobs_positions --
-- Where the schedules of claimed jobs stand (D-269): each job's next occurrence, or completed
-- (a one-off, or a schedule with no occurrence left), written in batches off the claim. Only
-- forward, and only over the version the claim saw and an active job: a registry write since
-- (a new version, a pause, a delete) decides the row instead. Not fenced: a position is written
-- only after its claim committed under the fence, and a later leader's load derives the same
-- position from the runs (`horizon_jobs`). No new version: the change feed does not carry it
-- (migration 0003's trigger).
--   $1 tenants  $2 job ids  $3 versions  $4 next occurrences ms ('n': none, complete)
UPDATE jobs j SET
    next_run_at = 'epoch'::timestamptz + p.next_ms * interval '1 millisecond',  -- NULL: none
    status = CASE WHEN p.next_ms IS NULL THEN 'completed' ELSE j.status END
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[],
            string_to_array($4::text, ',', 'n')::bigint[]) AS p(tenant, job_id, version, next_ms)
WHERE j.tenant = p.tenant AND j.job_id = p.job_id
  AND j.version + 0 = p.version AND j.status = 'active'
  AND (p.next_ms IS NULL
       OR j.next_run_at + interval '0'
          < 'epoch'::timestamptz + p.next_ms * interval '1 millisecond')

-- jobs_run_counts_read --
-- Limited runs (migration 0020): per job with `max_runs`, its scheduled runs (not skipped)
-- before the instant about to be claimed — what the row counted plus the runs claimed since —
-- so the count is exact whatever a previous leader wrote or lost, and a repeated claim of an
-- instant counts what it counted the first time; and where the count starts (`since`: an
-- instant planned before it, which a stale position can bring back, is not the limit's).
--   $1 tenants  $2 job ids  $3 the instants to be claimed, ms (comma-joined)
SELECT j.tenant, j.job_id,
       j.runs_done + (SELECT count(*) FROM job_runs r
                      WHERE r.tenant = j.tenant AND r.job_id = j.job_id
                        AND r.scheduled_at >= coalesce(j.counted_through, j.created_at)
                        AND r.scheduled_at < 'epoch'::timestamptz + k.ms * interval '1 millisecond'
                        AND r.origin = 'schedule' AND r.status <> 'skipped') AS done,
       (extract(epoch FROM coalesce(j.counted_through, j.created_at)) * 1000)::bigint AS since
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[]) AS k(tenant, job_id, ms)
JOIN jobs j ON j.tenant = k.tenant AND j.job_id = k.job_id

-- jobs_run_counts_write --
-- What a leader counted (shards/positions.py `counted`): the job's counted runs scheduled before
-- `counted_through`; forward only, so a late write never moves the count back.
--   $1 tenants  $2 job ids  $3 runs done  $4 counted through, ms (comma-joined)
UPDATE jobs j SET runs_done = c.done,
                  counted_through = 'epoch'::timestamptz + c.through * interval '1 millisecond'
FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
            string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::bigint[])
     AS c(tenant, job_id, done, through)
WHERE j.tenant = c.tenant AND j.job_id = c.job_id
  AND coalesce(j.counted_through, j.created_at)
      < 'epoch'::timestamptz + c.through * interval '1 millisecond'

-- jobs_end_delete --
-- Jobs whose active window's last occurrence was claimed and whose `after_end` is 'delete'
-- (shards/positions.py `ended`): deleted as the registry deletes (status 'deleted', no next
-- occurrence), and each tenant's job count moved with them. Over the version the claim saw
-- and only while the job is active, like `jobs_positions`; no new version (the leader already
-- holds no next occurrence, and a horizon load reads active jobs only). Rows are locked jobs
-- first, then `tenant_usage` in tenant order: the registry's order.
--   $1 tenants  $2 job ids  $3 versions (comma-joined)
WITH gone AS (
    UPDATE jobs j SET status = 'deleted', next_run_at = NULL
    FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
                string_to_array($3::text, ',')::bigint[]) AS p(tenant, job_id, version)
    WHERE j.tenant = p.tenant AND j.job_id = p.job_id
      AND j.version = p.version AND j.status = 'active'
    RETURNING j.tenant
), counted AS MATERIALIZED (
    SELECT tenant, count(*) AS n FROM gone GROUP BY tenant
), locked AS MATERIALIZED (  -- in tenant order, as tenant_usage_write locks them
    SELECT u.tenant FROM tenant_usage u
    WHERE u.tenant IN (SELECT tenant FROM counted)
    ORDER BY u.tenant
    FOR UPDATE
)
UPDATE tenant_usage u SET jobs = u.jobs - c.n
FROM counted c
WHERE u.tenant = c.tenant AND u.tenant IN (SELECT tenant FROM locked)

-- outbox_adopt --
-- A new leader's outbox (I1), when the previous leader did not step down cleanly: dispatched
-- pending runs of the shard that an earlier epoch claimed (the previous leader may have died
-- before or after publishing them) are taken over at once, without waiting for their publish
-- lease, and published again, same attempt. Only a takeover leaves such rows: every later
-- pending row is this epoch's own, and its leader publishes it again itself until the broker
-- acknowledges it. A duplicate envelope is
-- harmless: the worker's claim matches one delivery (I4).
-- A run another transaction holds (a worker claiming the previous leader's envelope) is
-- skipped, as by the sweeps (`sweep_republish`): waiting deadlocked with workers' batches
-- (D-145). The leader goes on adopting at its next sweeps while
-- `shard_has_unadopted` finds such a run still pending.
--   $1 shard  $2 epoch  $3 lease ms  $4 batch limit
WITH stale AS (
    SELECT tenant, job_id, scheduled_at FROM job_runs
    WHERE shard_id = $1 AND status IN ('pending', 'published') AND lease_until IS NOT NULL
      AND epoch <> $2
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE job_runs r SET lease_until = now() + $3::bigint * interval '1 millisecond', epoch = $2
FROM stale l, jobs j
WHERE r.tenant = l.tenant AND r.job_id = l.job_id AND r.scheduled_at = l.scheduled_at
  AND r.status IN ('pending', 'published') AND r.epoch <> $2
  AND j.tenant = r.tenant AND j.job_id = r.job_id
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
          r.attempt, r.priority, j.handler, j.target::text AS target, j.payload::text AS payload,
          j.timeout_ms, r.origin

-- sweep_republish --
-- Sweeper (a), the safety net: this epoch's dispatched runs still not started when their
-- publish lease lapsed (default 5 minutes: an acknowledged envelope the broker lost, or a
-- backlog that long) get a new lease and are published again with the same attempt. A publish
-- the broker refused does not wait for this: the leader retries it itself.
-- A run another transaction holds is skipped, not waited for (as in all three sweeps): it is a
-- worker's claim or result write in flight, which settles the run or leaves it for the next
-- sweep. Waiting let a sweep (locking its runs in its scan's order) and a worker's batch (in
-- its deliveries' order) each hold a row the other wanted: deadlocks, retried by both.
--   $1 shard  $2 epoch  $3 lease ms  $4 batch limit
WITH lapsed AS (
    SELECT tenant, job_id, scheduled_at FROM job_runs
    WHERE shard_id = $1 AND status IN ('pending', 'published') AND lease_until < now()
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE job_runs r SET lease_until = now() + $3::bigint * interval '1 millisecond', epoch = $2
FROM lapsed l, jobs j
WHERE r.tenant = l.tenant AND r.job_id = l.job_id AND r.scheduled_at = l.scheduled_at
  AND r.status IN ('pending', 'published') AND r.lease_until < now()
  AND j.tenant = r.tenant AND j.job_id = r.job_id
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
          r.attempt, r.priority, j.handler, j.target::text AS target, j.payload::text AS payload,
          j.timeout_ms, r.origin

-- sweep_requeue_running --
-- Sweeper (b): running runs whose worker lease lapsed (the worker died) with attempts left:
-- the next attempt, pending under a new publish lease, published again by the caller.
WITH lapsed AS (
    SELECT tenant, job_id, scheduled_at FROM job_runs
    WHERE shard_id = $1 AND status = 'running' AND lease_until < now()
      AND attempt < max_attempts
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE job_runs r SET
    status = 'pending', attempt = r.attempt + 1, epoch = $2,
    lease_until = now() + $3::bigint * interval '1 millisecond',
    published_at = NULL, worker = NULL, started_at = NULL,
    last_error = 'attempt ' || r.attempt || ': the worker''s lease lapsed (worker lost)'
FROM lapsed l, jobs j
WHERE r.tenant = l.tenant AND r.job_id = l.job_id AND r.scheduled_at = l.scheduled_at
  AND r.status = 'running' AND r.lease_until < now() AND r.attempt < r.max_attempts
  AND j.tenant = r.tenant AND j.job_id = r.job_id
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
          r.attempt, r.priority, j.handler, j.target::text AS target, j.payload::text AS payload,
          j.timeout_ms, r.origin

-- sweep_dead_running --
-- Sweeper (b): running runs whose worker lease lapsed on their last attempt become dead; the
-- caller publishes their dead letters before it commits.
WITH lapsed AS (
    SELECT tenant, job_id, scheduled_at FROM job_runs
    WHERE shard_id = $1 AND status = 'running' AND lease_until < now()
      AND attempt >= max_attempts
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE job_runs r SET
    status = 'dead', finished_at = now(), lease_until = NULL,
    last_error = 'the worker''s lease lapsed on attempt ' || r.attempt || ' of '
                 || r.max_attempts || ' (worker lost)'
FROM lapsed l, jobs j
WHERE r.tenant = l.tenant AND r.job_id = l.job_id AND r.scheduled_at = l.scheduled_at
  AND r.status = 'running' AND r.lease_until < now() AND r.attempt >= r.max_attempts
  AND j.tenant = r.tenant AND j.job_id = r.job_id
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
          r.attempt, r.epoch, r.priority, j.handler, j.target::text AS target,
          j.payload::text AS payload, j.timeout_ms, r.origin, r.last_error,
          (extract(epoch FROM r.finished_at) * 1000)::bigint AS dead_at

-- retries_claim --
-- Sweeper (c), through the wheel: retrying runs whose retry_at is still the one the wheel
-- expected become the next attempt, pending under a new publish lease (I6).
--   $1 shard  $2 epoch  $3 lease ms  $4 tenant  $5 job_id  $6 scheduled ms  $7 retry_at ms
UPDATE job_runs r SET
    status = 'pending', attempt = r.attempt + 1, epoch = $2,
    lease_until = now() + $3::bigint * interval '1 millisecond',
    published_at = NULL, worker = NULL, started_at = NULL
FROM unnest($4::text[], $5::text[], $6::bigint[], $7::bigint[]) AS k(tenant, job_id, ms, retry_ms),
     jobs j
WHERE r.tenant = k.tenant AND r.job_id = k.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + k.ms * interval '1 millisecond'
  AND r.shard_id = $1 AND r.status = 'retrying'
  AND ceil(extract(epoch FROM r.retry_at) * 1000)::bigint = k.retry_ms  -- as horizon_retries reads it
  AND j.tenant = r.tenant AND j.job_id = r.job_id
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
          r.attempt, r.priority, j.handler, j.target::text AS target, j.payload::text AS payload,
          j.timeout_ms, r.origin

-- first_dispatch_overlap --
-- The overlap policy of the jobs of due attempt-0 runs (triggers, backfills) whose policy is
-- not `allow`: those runs are decided like a scheduled occurrence before they are claimed.
SELECT j.tenant, j.job_id, j.overlap_policy
FROM jobs j
JOIN unnest($1::text[], $2::text[]) AS k(tenant, job_id)
  ON j.tenant = k.tenant AND j.job_id = k.job_id
WHERE j.overlap_policy <> 'allow'

-- retries_hold --
-- A due attempt-0 run that overlap `buffer_one` holds: it becomes the job's buffered run, as a
-- scheduled occurrence would (pending at attempt 1 without a lease; `buffered_release` sends
-- it when the job is free). Matches retry_at like `retries_claim`.
--   $1 shard  $2 epoch  $3 tenant  $4 job_id  $5 scheduled ms  $6 retry_at ms
UPDATE job_runs r SET
    status = 'pending', attempt = 1, epoch = $2, lease_until = NULL, published_at = NULL
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS k(tenant, job_id, ms, retry_ms)
WHERE r.tenant = k.tenant AND r.job_id = k.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + k.ms * interval '1 millisecond'
  AND r.shard_id = $1 AND r.status = 'retrying' AND r.attempt = 0
  AND ceil(extract(epoch FROM r.retry_at) * 1000)::bigint = k.retry_ms
RETURNING r.tenant, r.job_id

-- retries_skip --
-- A due attempt-0 run that overlap `skip` (or a full `buffer_one`) refuses: recorded skipped
-- with the reason, as a scheduled occurrence would be (I7).
--   $1 shard  $2 reason  $3 tenant  $4 job_id  $5 scheduled ms  $6 retry_at ms
UPDATE job_runs r SET
    status = 'skipped', skip_reason = $2, finished_at = now(), retry_at = NULL
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS k(tenant, job_id, ms, retry_ms)
WHERE r.tenant = k.tenant AND r.job_id = k.job_id
  AND r.scheduled_at = 'epoch'::timestamptz + k.ms * interval '1 millisecond'
  AND r.shard_id = $1 AND r.status = 'retrying' AND r.attempt = 0
  AND ceil(extract(epoch FROM r.retry_at) * 1000)::bigint = k.retry_ms
RETURNING r.tenant, r.job_id

-- buffered_release --
-- Overlap buffer_one: a buffered run (pending without a lease) whose job has no other run in
-- flight gets its publish lease and goes out.
--   $1 shard  $2 epoch  $3 lease ms
WITH ready AS (
    SELECT b.tenant, b.job_id, b.scheduled_at FROM job_runs b
    WHERE b.shard_id = $1 AND b.status = 'pending' AND b.lease_until IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM job_runs o
          WHERE o.tenant = b.tenant AND o.job_id = b.job_id
            AND o.overlap_tracked AND o.status IN ('pending', 'published', 'running', 'retrying')
            AND (o.status <> 'pending' OR o.lease_until IS NOT NULL)
            AND NOT (o.status = 'retrying' AND o.attempt = 0))
    FOR UPDATE OF b
)
UPDATE job_runs r SET lease_until = now() + $3::bigint * interval '1 millisecond', epoch = $2
FROM ready b, jobs j
WHERE r.tenant = b.tenant AND r.job_id = b.job_id AND r.scheduled_at = b.scheduled_at
  AND r.status = 'pending' AND r.lease_until IS NULL
  AND j.tenant = r.tenant AND j.job_id = r.job_id
RETURNING r.tenant, r.job_id, (extract(epoch FROM r.scheduled_at) * 1000)::bigint AS scheduled_at,
          r.attempt, r.priority, j.handler, j.target::text AS target, j.payload::text AS payload,
          j.timeout_ms, r.origin

-- shard_has_lapsed --
-- Whether any run of the shard has a lapsed lease, i.e. whether the sweeps (a) and (b) have
-- work: one probe of `job_runs_lease` per partition. An idle shard's sweep then costs this
-- round trip instead of two fenced transactions (nine round trips), which with 64 shards
-- swept every 2 s was, with the retry read and the pool's reset, ~350 round trips a second
-- of background load.
SELECT EXISTS (
    SELECT 1 FROM job_runs
    WHERE shard_id = $1 AND status IN ('pending', 'published', 'running') AND lease_until < now()
)

-- shard_has_unadopted --
-- Whether a dispatched pending run of an earlier epoch is left in the shard (`outbox_adopt`
-- skipped it, or its batch limit stopped it): the leader adopts again at its next sweep.
--   $1 shard  $2 epoch
SELECT EXISTS (
    SELECT 1 FROM job_runs
    WHERE shard_id = $1 AND status IN ('pending', 'published') AND lease_until IS NOT NULL
      AND epoch <> $2
)

-- shard_has_buffered --
SELECT EXISTS (
    SELECT 1 FROM job_runs WHERE shard_id = $1 AND status = 'pending' AND lease_until IS NULL
) AS any

-- calendars_changed_since --
-- The exclusion calendars (migration 0021) written by a transaction not yet committed when the
-- previous poll's position was taken (`feed_position`; '0': all of them, the first load).
-- A deleted calendar comes with a NULL document; rows may repeat across polls (by version).
SELECT c.tenant, c.name, c.version, c.document::text AS document
FROM calendars c
WHERE c.change_xid >= $1::text::xid8
ORDER BY c.change_xid
