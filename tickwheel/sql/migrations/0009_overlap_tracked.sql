-- 0009: only runs whose job has an overlap policy are indexed for the overlap policies.
--
-- `job_runs_in_flight (tenant, job_id)` held an entry for every version of every run in flight
-- — its insert, its claim, its retries — for all jobs, though only jobs whose overlap policy is
-- `skip` or `buffer_one` ever count their runs in flight (`runs_in_flight`,
-- `buffered_release`). Each claimed run thus wrote two entries of the same key nobody read,
-- and the index's pages, full of dead duplicates, kept Postgres busy deleting them bottom-up.
--
-- `overlap_tracked` says whether the run's job had such a policy when the run was created. It
-- defaults to true, so a writer that does not know (a replay, a manual insert) is counted;
-- the leader's claim and the runs on demand set it from the job. A job whose policy changes
-- from `allow` while runs of it are in flight: those runs are not counted, so the next
-- occurrence may overlap them once (docs/DECISIONS.md D-130).
ALTER TABLE job_runs ADD COLUMN overlap_tracked boolean NOT NULL DEFAULT true;
CREATE INDEX job_runs_overlap ON job_runs (tenant, job_id)
    WHERE overlap_tracked AND status IN ('pending', 'published', 'running', 'retrying');
DROP INDEX job_runs_in_flight;
