-- 0022: jitter (issue 50, D-287): a cron job with `jitter_ms` J runs each occurrence up to J
-- milliseconds after its scheduled instant, by an offset its run key decides
-- (tickwheel/schedule/jitter.py). A column, not only the document, because a leader's horizon
-- reads it for every loaded job. NULL: no jitter. Nullable without a default, so adding it
-- rewrites no row; the check holds for rows written from now on (NOT VALID: every existing row
-- is NULL, and validating would scan the whole table under the migration's lock). Its bound
-- is the registry's JITTER_MAX_MS; that it is below the schedule's period is the registry's
-- check (it needs the schedule's occurrences).
ALTER TABLE jobs
    ADD COLUMN jitter_ms integer,
    ADD CONSTRAINT jobs_jitter_ms_range CHECK (jitter_ms BETWEEN 1 AND 3600000) NOT VALID;
