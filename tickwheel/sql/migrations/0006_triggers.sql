-- 0006: idempotency of trigger requests (registry_api/on_demand.py).
--   trigger_requests  one row per (tenant, job, idempotency key) of a trigger: the run it
--                     started (scheduled_at). The same key within 24 hours answers that run
--                     key again and starts nothing; an older row is replaced by a new run.
--                     HTTP keys come from the `Idempotency-Key` header; a Kafka trigger uses
--                     its explicit `idempotency_key`, else its source position (so a
--                     redelivered message starts nothing). Rows older than a day are removed
--                     by the retention (`tickwheel gc`).
-- Backfills need no table: each occurrence's run key is its own idempotency key.
CREATE TABLE trigger_requests (
    tenant           text NOT NULL,
    job_id           text NOT NULL,
    idempotency_key  text NOT NULL,
    scheduled_at     timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id, idempotency_key)
);
CREATE INDEX trigger_requests_created ON trigger_requests (created_at);
