-- Design B's run ledger (docs/journal/run-path.md, *Design B*; DESIGN §3 I1-I5): a CANDIDATE,
-- measured by bench/components/statements_b.py on scratch databases. It is not a migration:
-- applied after the migrations, beside `job_runs` (which B's statements do not touch).
--
-- Two narrow tables, insert-only on the hot path: no UPDATE, no row lock on a run or a job, no
-- dead tuple. Each run writes two heap tuples and two btree entries (the primary keys); the
-- other indexes are partial on rows the hot path does not write (a cron run's `next_at`, a
-- failure, a dead run) or BRIN, which adds no entry per row.
--
--   run_claims    one row per run (the run key: tenant, job_id, scheduled_at), inserted by the
--                 leader's fenced claim after a key read of the job's version and status
--                 (`b_claim`): the record that exists before the message (I1), and the lease
--                 from claim to result (I4) — `lease_until` covers publishing and running
--                 (the job's timeout included), so a worker writes nothing before it runs.
--                 A repeated claim of the same instant conflicts on the key: no second row.
--                 `next_at` is a cron job's following occurrence, the schedule's position
--                 (I3: not written into the job's row at every fire).
--   run_outcomes  one row per run and attempt, inserted once by the worker (`b_outcomes`) after
--                 it ran the delivery and before its offset (I5): succeeded | retrying (with
--                 retry_at: the leader re-dispatches attempt + 1, I6) | dead | skipped |
--                 withdrawn. A second result for the same attempt conflicts on the key. A late
--                 success of attempt n after attempt n + 1 went out conflicts with the
--                 `retrying` row of attempt n, so a second success is impossible by key.
--
-- Keys as the brief and DESIGN I3/I4 put them (claims per run, outcomes per run and attempt);
-- run-path.md §3.2 sketches the opposite (claims per attempt, one terminal outcome per run, a
-- `run_failures` table). The hot path's cost is the same either way (one int more or less in
-- one primary key); the shapes differ on the retry path.
--
-- Statuses as text, the domain's words (tickwheel/domain.py RunStatus), not run-path.md's
-- one-byte "char" codes: ~9 bytes more per outcome row.
--
-- Day-partitioned on scheduled_at as job_runs is (retention stays a partition drop), with the
-- same range of partitions job_runs has in a scratch database (yesterday to 8 days ahead) and
-- a default partition. `run_path_b_schema_flat.sql` is the same without partitions: what tuple
-- routing and run-time pruning cost, measured by difference.

CREATE TABLE run_claims (
    tenant        text NOT NULL,
    job_id        text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    shard_id      integer NOT NULL,
    epoch         bigint NOT NULL,            -- the leader's: adoption at takeover reads it
    job_version   bigint NOT NULL,            -- the job's version the claim read
    attempt       integer NOT NULL DEFAULT 1, -- the attempt this claim dispatches
    max_attempts  integer NOT NULL,           -- the budget, copied from the job at claim time
    origin        text NOT NULL DEFAULT 'schedule',
    lease_until   timestamptz NOT NULL,       -- claim + publish bound + job timeout + slack
    next_at       timestamptz,                -- cron: the following occurrence; NULL: none
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id, scheduled_at)
) PARTITION BY RANGE (scheduled_at);
-- A shard's schedule positions (the horizon load of cron jobs): cron runs only.
CREATE INDEX run_claims_next ON run_claims (shard_id, next_at) WHERE next_at IS NOT NULL;
-- Sweeps and adoption read claims by when they were made: a range of seconds.
CREATE INDEX run_claims_claimed ON run_claims USING brin (claimed_at);

CREATE TABLE run_outcomes (
    tenant        text NOT NULL,
    job_id        text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    attempt       integer NOT NULL,
    status        text NOT NULL CONSTRAINT run_outcomes_status
                  CHECK (status IN ('succeeded', 'retrying', 'dead', 'skipped', 'withdrawn')),
    shard_id      integer NOT NULL,           -- the job's (tickwheel/sharding.py): retries per shard
    worker        text,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL DEFAULT now(),
    retry_at      timestamptz,                -- retrying: when attempt + 1 is due
    error         text,
    PRIMARY KEY (tenant, job_id, scheduled_at, attempt)
) PARTITION BY RANGE (scheduled_at);
-- The status page's throughput: finished runs by time, no entry per row.
CREATE INDEX run_outcomes_finished ON run_outcomes USING brin (finished_at);
-- Insert-only, so a partial index taxes only the rows it matches: failures and dead runs.
CREATE INDEX run_outcomes_retry ON run_outcomes (shard_id, retry_at) WHERE status = 'retrying';
CREATE INDEX run_outcomes_dead ON run_outcomes (finished_at) WHERE status = 'dead';

CREATE TABLE run_claims_default PARTITION OF run_claims DEFAULT;
CREATE TABLE run_outcomes_default PARTITION OF run_outcomes DEFAULT;

-- One partition per UTC day and table: run_claims_pYYYYMMDD, run_outcomes_pYYYYMMDD (as
-- job_runs_ensure_partitions, migration 0001, without its default-partition check: a scratch
-- database's default partitions are empty).
CREATE FUNCTION run_ledger_ensure_partitions(first_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    parent text;
    created integer := 0;
BEGIN
    FOR i IN 0 .. days - 1 LOOP
        day := first_day + i;
        FOREACH parent IN ARRAY ARRAY['run_claims', 'run_outcomes'] LOOP
            IF to_regclass(parent || '_p' || to_char(day, 'YYYYMMDD')) IS NULL THEN
                EXECUTE format(
                    'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                    parent || '_p' || to_char(day, 'YYYYMMDD'), parent,
                    (day::timestamp AT TIME ZONE 'UTC'),
                    ((day + 1)::timestamp AT TIME ZONE 'UTC'));
                created := created + 1;
            END IF;
        END LOOP;
    END LOOP;
    RETURN created;
END $$;

SELECT run_ledger_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, 10);
