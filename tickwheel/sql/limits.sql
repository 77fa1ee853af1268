-- Limits that hold for the whole cluster (workers/host_limits.py, workers/tenant_caps.py;
-- migration 0011). Instants of the rate arithmetic are integer microseconds on the database's
-- clock (`clock_timestamp()`, read once per statement), so every worker counts on one clock.

-- target_host_add --
-- The row of a host no worker has called yet (its first `target_take` found none).
-- $1 host key
INSERT INTO target_hosts (host) VALUES ($1::text) ON CONFLICT (host) DO NOTHING

-- target_take --
-- Send instants for a batch of calls to one host, and the host's breaker, in ONE statement
-- under the row's lock. GCRA as workers/gcra.py writes it: start = max(tat, now); the i-th
-- send may go at start + i*T - tau; those within the horizon are granted and the TAT moves by
-- T for each. The breaker (workers/host_limits.py has the diagram): open (open_until ahead)
-- grants nothing; half-open (K failures counted, cool-down over) grants one call, the probe,
-- to the worker that claims it (fenced: no other probe alive); closed grants by rate alone.
-- No row back: the host has no row yet (target_host_add, then again).
-- $1 host key, $2 sends wanted, $3 T (us), $4 tau (us), $5 horizon (us), $6 K (failures
-- that open the breaker), $7 worker id, $8 probe lease (ms)
WITH clock AS (
    SELECT t AS at, (extract(epoch FROM t) * 1000000)::bigint AS now_us
    FROM clock_timestamp() AS t
), cur AS (
    SELECT h.host, h.tat_us, h.probe_until, c.at, c.now_us,
           greatest(h.tat_us, c.now_us) AS start_us,
           CASE WHEN h.open_until > c.at THEN 'open'
                WHEN h.failures >= $6::integer THEN 'half_open'
                ELSE 'closed' END AS state
    FROM target_hosts h, clock c
    WHERE h.host = $1::text
    FOR UPDATE OF h
), decided AS (
    SELECT cur.*,
           CASE WHEN cur.state = 'open' THEN 0
                WHEN cur.state = 'half_open' AND cur.probe_until > cur.at THEN 0
                WHEN cur.now_us + $5::bigint + $4::bigint - cur.start_us < 0 THEN 0
                ELSE least(CASE WHEN cur.state = 'half_open' THEN 1 ELSE $2::integer END,
                           (cur.now_us + $5::bigint + $4::bigint - cur.start_us) / $3::bigint + 1)
           END AS granted
    FROM cur
)
UPDATE target_hosts h
SET tat_us = CASE WHEN d.granted > 0 THEN d.start_us + d.granted * $3::bigint ELSE h.tat_us END,
    probe_owner = CASE WHEN d.state = 'half_open' AND d.granted > 0 THEN $7::text
                       ELSE h.probe_owner END,
    probe_until = CASE WHEN d.state = 'half_open' AND d.granted > 0
                       THEN d.at + $8::bigint * interval '1 millisecond' ELSE h.probe_until END,
    updated_at = d.at
FROM decided d
WHERE h.host = d.host
RETURNING d.granted::integer AS granted, d.start_us, d.now_us, d.state,
          h.tat_us, h.failures,
          (extract(epoch FROM h.open_until) * 1000000)::bigint AS open_until_us,
          (extract(epoch FROM h.probe_until) * 1000000)::bigint AS probe_until_us

-- target_failed --
-- Calls to a host that failed (5xx, 429, timeout, unreachable), counted for every worker: the
-- consecutive failures grow by $2; reaching K opens the breaker for the cool-down (a breaker
-- already open stays as it is: the failures of calls sent before it opened do not prolong it),
-- which ends any probe. Returns the row's breaker as it is now, and whether this opened it.
-- $1 host key, $2 failures, $3 K, $4 cool-down (ms)
WITH clock AS (
    SELECT t AS at, (extract(epoch FROM t) * 1000000)::bigint AS now_us
    FROM clock_timestamp() AS t
), cur AS (
    SELECT h.host, c.at, c.now_us,
           h.failures + $2::integer >= $3::integer
           AND (h.open_until IS NULL OR h.open_until <= c.at) AS opening
    FROM target_hosts h, clock c
    WHERE h.host = $1::text
    FOR UPDATE OF h
)
UPDATE target_hosts h
SET failures = h.failures + $2::integer,
    open_until = CASE WHEN d.opening THEN d.at + $4::bigint * interval '1 millisecond'
                      ELSE h.open_until END,
    opens = h.opens + CASE WHEN d.opening THEN 1 ELSE 0 END,
    probe_owner = CASE WHEN d.opening THEN NULL ELSE h.probe_owner END,
    probe_until = CASE WHEN d.opening THEN NULL ELSE h.probe_until END,
    updated_at = d.at
FROM cur d
WHERE h.host = d.host
RETURNING d.opening AS opened, d.now_us, h.failures,
          (extract(epoch FROM h.open_until) * 1000000)::bigint AS open_until_us

-- target_succeeded --
-- A call to a host succeeded while the worker knew of failures: the breaker closes for all.
-- $1 host key
UPDATE target_hosts
SET failures = 0, open_until = NULL, probe_owner = NULL, probe_until = NULL,
    updated_at = clock_timestamp()
WHERE host = $1::text
  AND (failures > 0 OR open_until IS NOT NULL OR probe_owner IS NOT NULL)

-- tenant_caps --
-- The capped tenants and their cap: the workers' cache, refreshed every few seconds. Their
-- runs running now come from `tenant_caps_running`, asked only when some tenant is capped.
-- (As one statement with the count as a correlated subquery on a status parameter, the
-- workers' generic plan took ~2 s per call with no tenant capped during a hot second:
-- journal/hot-second.md, *A regression the merges brought*.)
SELECT name, max_running FROM tenants WHERE max_running IS NOT NULL

-- tenant_caps_running --
-- Runs running now across the cluster per capped tenant ($1), through the partial index
-- job_runs_capped_running: its predicate's literal status lets the planner use it.
SELECT tenant, count(*) AS running
FROM job_runs
WHERE tenant = ANY ($1::text[]) AND cap_tracked AND status = 'running'
GROUP BY tenant

-- tenant_cap_lock --
-- The first statement of a capped claim's transaction: the capped tenants' rows, locked in
-- name order (no deadlock between workers), so that claims of one tenant take turns and each
-- counts the running runs the one before it committed. NO KEY UPDATE: a job inserted for the
-- tenant meanwhile (its foreign key takes KEY SHARE) is not held up.
-- $1 tenant names
SELECT name FROM tenants WHERE name = ANY ($1::text[]) ORDER BY name FOR NO KEY UPDATE

-- worker_claim_capped --
-- `worker_claim` for runs of capped tenants, after `tenant_cap_lock` in the same transaction:
-- per tenant, only as many of the claimable runs as its cap has free slots (its cap minus its
-- runs running now, counted through job_runs_capped_running) are claimed, in the batch's
-- order, and marked `cap_tracked`; the others are held: back to `retrying` due in $9 ms with
-- their attempt budget raised by one (the leader re-dispatches them as a retry, and a hold
-- spends no attempt), `holds` + 1, `held_since` kept from the first hold. A claimed run that
-- was held records the time it waited in `held_ms`.
-- $1..$8 as worker_claim, $9 hold delay ms, $10 'running'.
-- Columns: those of worker_claim, then `held` (true: held back, the other columns but the
-- run's identity NULL).
WITH wanted AS (
    SELECT w.tenant, w.job_id,
           'epoch'::timestamptz + w.scheduled_ms * interval '1 millisecond' AS scheduled_at,
           w.attempt,
           'epoch'::timestamptz + w.published_ms * interval '1 millisecond' AS published_at,
           w.ord
    FROM unnest(string_to_array($1::text, ','), string_to_array($2::text, ','),
                string_to_array($3::text, ',')::bigint[], string_to_array($4::text, ',')::integer[],
                string_to_array($7::text, ',', 'n')::bigint[])
         WITH ORDINALITY AS w(tenant, job_id, scheduled_ms, attempt, published_ms, ord)
), claimable AS (
    SELECT w.*, row_number() OVER (PARTITION BY w.tenant ORDER BY w.ord) AS n
    FROM wanted w
    JOIN job_runs r
      ON r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
    WHERE r.status = ANY ($8::text[]) AND r.attempt = w.attempt AND r.lease_until IS NOT NULL
), room AS (
    SELECT t.name AS tenant,
           coalesce(t.max_running - (SELECT count(*) FROM job_runs x
                                     WHERE x.tenant = t.name AND x.cap_tracked
                                       AND x.status = $10::text),
                    2147483647) AS free
    FROM tenants t
    WHERE t.name IN (SELECT tenant FROM claimable)
), decided AS (
    SELECT c.*, c.n <= coalesce(m.free, 2147483647) AS granted
    FROM claimable c LEFT JOIN room m ON m.tenant = c.tenant
), claimed AS (
    UPDATE job_runs r
    SET status = 'running', worker = $5::text, started_at = now(),
        lease_until = now() + $6::bigint * interval '1 millisecond',
        published_at = coalesce(w.published_at, r.published_at),
        cap_tracked = true,
        held_ms = CASE WHEN r.held_since IS NULL THEN r.held_ms
                       ELSE coalesce(r.held_ms, 0)
                            + (extract(epoch FROM now() - r.held_since) * 1000)::bigint END,
        held_since = NULL
    FROM decided w
    WHERE w.granted
      AND r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
      AND r.status = ANY ($8::text[]) AND r.attempt = w.attempt AND r.lease_until IS NOT NULL
    RETURNING r.tenant, r.job_id, r.scheduled_at, r.attempt, r.max_attempts, r.started_at
), held AS (
    UPDATE job_runs r
    SET status = 'retrying', retry_at = now() + $9::bigint * interval '1 millisecond',
        lease_until = NULL, max_attempts = r.max_attempts + 1, holds = r.holds + 1,
        held_since = coalesce(r.held_since, now())
    FROM decided w
    WHERE NOT w.granted
      AND r.tenant = w.tenant AND r.job_id = w.job_id AND r.scheduled_at = w.scheduled_at
      AND r.status = ANY ($8::text[]) AND r.attempt = w.attempt AND r.lease_until IS NOT NULL
    RETURNING r.tenant, r.job_id, r.scheduled_at
)
SELECT c.tenant, c.job_id,
       (extract(epoch FROM c.scheduled_at) * 1000)::bigint AS scheduled_ms,
       c.attempt, c.max_attempts,
       (extract(epoch FROM c.started_at) * 1000)::bigint AS started_ms,
       coalesce(j.backoff_base_ms, 10000) AS backoff_base_ms,
       coalesce(j.backoff_cap_ms, 600000) AS backoff_cap_ms,
       j.handler, j.target::text AS target, j.payload::text AS payload, j.timeout_ms,
       false AS held
FROM claimed c
LEFT JOIN jobs j ON j.tenant = c.tenant AND j.job_id = c.job_id
UNION ALL
SELECT h.tenant, h.job_id, (extract(epoch FROM h.scheduled_at) * 1000)::bigint,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true
FROM held h
