-- 0002: what dispatching and executing runs need on the run ledger (see tickwheel/domain.py for
-- the run lifecycle).
--   origin        how the run came to be: schedule | trigger | backfill | replay
--   published_at  when the broker acknowledged the run's envelope (the last publish)
--   max_attempts  the attempt budget, copied from the job at claim time (a replay resets it)
--   lease_until   already exists: for pending/published rows it is the publish lease (re-publish
--                 when it lapses before a worker started the run); for running rows it is the
--                 worker's lease, extended by its heartbeat.
ALTER TABLE job_runs
    ADD COLUMN origin text NOT NULL DEFAULT 'schedule'
        CONSTRAINT job_runs_origin CHECK (origin IN ('schedule', 'trigger', 'backfill', 'replay')),
    ADD COLUMN published_at timestamptz,
    ADD COLUMN max_attempts integer NOT NULL DEFAULT 5;

-- The sweeper's scan: runs of a shard whose lease lapsed while not finished.
CREATE INDEX job_runs_lease ON job_runs (shard_id, lease_until)
    WHERE status IN ('pending', 'published', 'running');
