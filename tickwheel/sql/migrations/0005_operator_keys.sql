-- 0005: operator keys and the status page's reads.
--   operator_keys  keys for the cross-tenant endpoints (`/v1/ops/…`, the `/ui` status page):
--                  random 256-bit secrets stored as SHA-256 like tenants' API keys, named by the
--                  operator they were given to (`tickwheel operator-key add NAME`). A name has at
--                  most one key that is not revoked; revoked keys stay as a record.
CREATE TABLE operator_keys (
    key_hash    bytea PRIMARY KEY,
    prefix      text NOT NULL,
    name        text NOT NULL CONSTRAINT operator_keys_name_form
                CHECK (name ~ '^[A-Za-z0-9._@-]+$' AND length(name) <= 64),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE UNIQUE INDEX operator_keys_active_name ON operator_keys (name) WHERE revoked_at IS NULL;

-- The status page's throughput chart reads the runs of the last minutes (ops_run_rates),
-- bounded by their scheduled instant and split by status: runs in flight through
-- job_runs_in_flight (0003), finished runs through this index. Partial on purpose: a run row is
-- inserted once and updated ~4 times, each update non-HOT (`status` is in partial indexes'
-- predicates), so an index over every row would take ~5 entries per run on the hot path; this
-- one takes one, when the run ends. (A BRIN index on scheduled_at was no better: updated rows
-- land in whatever page has room, which would widen every range to "today".)
CREATE INDEX job_runs_finished ON job_runs (scheduled_at) WHERE status IN ('succeeded', 'dead');
-- Recent dead runs, newest first (ops_dead_runs). Partial: only dead rows pay for it.
CREATE INDEX job_runs_dead ON job_runs (finished_at) WHERE status = 'dead';
