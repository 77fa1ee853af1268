-- 0011: limits that hold for the whole cluster (issue 25): per target host a rate (GCRA) and
-- a shared circuit breaker; per tenant a cap on its runs running at once.
--
-- `target_hosts`: one row per target host ("host:port") that a worker has called. `tat_us` is
-- the GCRA's theoretical arrival time (database clock, microseconds since the epoch): one
-- UPDATE … RETURNING grants a batch of send instants (`target_take`). The breaker's state is
-- the rest of the row: consecutive failures counted by every worker, `open_until` (calls fail
-- fast before it), and a half-open probe claimed by one worker at a time (`probe_owner`,
-- `probe_until`: a fenced UPDATE, and a probe whose worker died lapses).
CREATE TABLE target_hosts (
    host         text PRIMARY KEY,
    tat_us       bigint NOT NULL DEFAULT 0,
    failures     integer NOT NULL DEFAULT 0,
    open_until   timestamptz,
    probe_owner  text,
    probe_until  timestamptz,
    opens        bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- NULL: no cap. Set with `tickwheel tenant cap`.
ALTER TABLE tenants ADD COLUMN max_running integer
    CONSTRAINT tenants_max_running_range CHECK (max_running BETWEEN 1 AND 1000000);

-- A run claimed under its tenant's cap is `cap_tracked`: only such runs are indexed while they
-- run, so the count of a capped tenant's running runs is an index probe and an uncapped
-- tenant's claim writes no entry (the lesson of 0009). `holds` counts how often the cap sent
-- the run back (each raised its attempt budget by one: a hold spends no attempt), `held_ms`
-- the time it waited in total, measured from `held_since` (its first hold) to the claim that
-- let it run.
ALTER TABLE job_runs
    ADD COLUMN cap_tracked boolean NOT NULL DEFAULT false,
    ADD COLUMN holds integer NOT NULL DEFAULT 0,
    ADD COLUMN held_since timestamptz,
    ADD COLUMN held_ms bigint;
CREATE INDEX job_runs_capped_running ON job_runs (tenant) WHERE cap_tracked AND status = 'running';
