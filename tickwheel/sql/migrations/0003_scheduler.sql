-- 0003: what the shard leaders (shards/) need beyond 0001/0002.

-- A leader's claim advances `next_run_at` (and completes one-offs) without a new version. Such
-- a write must not put the job back on the change feed: every claimed job would otherwise come
-- back to its own leader one poll later (100,000 rows after a hot second). Registry writes
-- always bump `version` (registry_api/state.py), so the feed keeps every change a leader has
-- not made itself.
CREATE OR REPLACE FUNCTION jobs_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version IS DISTINCT FROM OLD.version THEN
        NEW.change_xid := pg_current_xact_id();
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END $$;

-- Overlap policies (skip, buffer_one) count a job's runs still in flight at claim time.
CREATE INDEX job_runs_in_flight ON job_runs (tenant, job_id)
    WHERE status IN ('pending', 'published', 'running', 'retrying');
