-- 0019: pause on failure (issue 50): a cron job with `pause_after_dead_runs` N is paused by the
-- registry after N consecutive dead runs (registry_api/auto_pause.py), with a note saying so.
-- NULL: never. Nullable without a default, so adding it rewrites no row; the check holds for
-- rows written from now on (every existing row is NULL).
ALTER TABLE jobs
    ADD COLUMN pause_after_dead_runs integer,
    ADD CONSTRAINT jobs_pause_after_dead_runs_range
        CHECK (pause_after_dead_runs BETWEEN 1 AND 100) NOT VALID;
