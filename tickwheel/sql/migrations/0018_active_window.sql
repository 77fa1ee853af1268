-- 0018: a cron schedule's active window (issue 50): no occurrence before `start_at` or after
-- `end_at` (both inclusive; NULL: unbounded), and what becomes of the job after its last
-- occurrence (`after_end`: NULL or 'complete' completes it, 'delete' deletes it). Columns, not
-- only the document, because a leader's horizon reads them for every loaded job. Nullable
-- without a default: adding them rewrites no row. The checks hold for rows written from now
-- on (NOT VALID: every existing row has NULLs, and validating would scan the whole table under
-- the migration's lock).
ALTER TABLE jobs
    ADD COLUMN start_at timestamptz,
    ADD COLUMN end_at timestamptz,
    ADD COLUMN after_end text,
    ADD CONSTRAINT jobs_after_end_known CHECK (after_end IN ('complete', 'delete')) NOT VALID,
    ADD CONSTRAINT jobs_window_ordered CHECK (end_at > start_at) NOT VALID;
