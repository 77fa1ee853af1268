-- 0003: what the shard leaders (shards/) need beyond 0001/0002.

-- A leader's claim advances `next_run_at` (and completes one-offs) without a new version. Such
-- a write must not put the job back on the change feed: every claimed job would otherwise come
-- back to its own leader one poll later (100,000 rows after a hot second). Registry writes
-- always bump `version` (registry_api/state.py), so the feed keeps every change a leader has
-- not made itself.
-- The trigger's WHEN clause is evaluated without calling PL/pgSQL, so a claim of thousands of
-- jobs pays nothing for it.
DROP TRIGGER jobs_touch ON jobs;
CREATE TRIGGER jobs_touch BEFORE UPDATE ON jobs FOR EACH ROW
    WHEN (NEW.version IS DISTINCT FROM OLD.version) EXECUTE FUNCTION jobs_touch();

-- Overlap policies (skip, buffer_one) count a job's runs still in flight at claim time.
CREATE INDEX job_runs_in_flight ON job_runs (tenant, job_id)
    WHERE status IN ('pending', 'published', 'running', 'retrying');
