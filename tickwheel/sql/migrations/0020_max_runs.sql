-- 0020: limited runs (issue 50): a cron job with `max_runs` N completes after N scheduled runs
-- (origin 'schedule', not skipped; triggers, backfills and replays are not counted).
--   runs_done        the job's counted runs scheduled before `counted_through`, written by a
--                    shard leader off the claim (shards/positions.py), forward only
--   counted_through  set by the registry to the job's first occurrence when it gets max_runs
--                    (created, re-created after a delete, or given max_runs); NULL: the
--                    job's `created_at`
-- A leader derives the count at each claim: runs_done plus the runs from counted_through up to
-- the instant it claims (`jobs_run_counts_read`), so a count lost with a leader is never lost.
-- The registry writes them only to start a count. Nullable or a
-- constant default: adding them rewrites no row.
ALTER TABLE jobs
    ADD COLUMN max_runs integer,
    ADD COLUMN runs_done bigint NOT NULL DEFAULT 0,
    ADD COLUMN counted_through timestamptz,
    ADD CONSTRAINT jobs_max_runs_positive CHECK (max_runs >= 1) NOT VALID;
