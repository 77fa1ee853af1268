-- Design B's run ledger WITHOUT partitions (diagnostic, not a candidate: retention needs the
-- day partitions of run_path_b_schema.sql). The same tables, columns and indexes as there, as
-- plain tables: measured beside the partitioned ones, the difference is what tuple routing
-- and run-time pruning cost B's statements (run-path.md §5, item 3).
--
--   .venv/bin/python -m tickwheel.bench.components.statements_b \
--       --b-schema bench/components/run_path_b_schema_flat.sql

CREATE TABLE run_claims (
    tenant        text NOT NULL,
    job_id        text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    shard_id      integer NOT NULL,
    epoch         bigint NOT NULL,
    job_version   bigint NOT NULL,
    attempt       integer NOT NULL DEFAULT 1,
    max_attempts  integer NOT NULL,
    origin        text NOT NULL DEFAULT 'schedule',
    lease_until   timestamptz NOT NULL,
    next_at       timestamptz,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id, scheduled_at)
);
CREATE INDEX run_claims_next ON run_claims (shard_id, next_at) WHERE next_at IS NOT NULL;
CREATE INDEX run_claims_claimed ON run_claims USING brin (claimed_at);

CREATE TABLE run_outcomes (
    tenant        text NOT NULL,
    job_id        text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    attempt       integer NOT NULL,
    status        text NOT NULL CONSTRAINT run_outcomes_status
                  CHECK (status IN ('succeeded', 'retrying', 'dead', 'skipped', 'withdrawn')),
    shard_id      integer NOT NULL,
    worker        text,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL DEFAULT now(),
    retry_at      timestamptz,
    error         text,
    PRIMARY KEY (tenant, job_id, scheduled_at, attempt)
);
CREATE INDEX run_outcomes_finished ON run_outcomes USING brin (finished_at);
CREATE INDEX run_outcomes_retry ON run_outcomes (shard_id, retry_at) WHERE status = 'retrying';
CREATE INDEX run_outcomes_dead ON run_outcomes (finished_at) WHERE status = 'dead';
