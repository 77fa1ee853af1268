-- 0008: fewer writes per run on the hot path (issue 23).
--
-- The change feed's wake-up hint is sent by the registry itself, once per shard a batch wrote
-- (`jobs_write_batch`), instead of by statement-level triggers on `jobs`: those also fired for
-- every claim a shard leader makes (an UPDATE of up to 5,000 jobs that bumps no version and
-- needs no hint), and each such firing first copied every updated row into a transition table
-- (spilling it to a temporary file) only to notify the leader of its own claim.
DROP TRIGGER jobs_notify_insert ON jobs;
DROP TRIGGER jobs_notify_update ON jobs;
DROP FUNCTION jobs_notify();

-- `job_runs_pending` duplicated `job_runs_lease` (shard_id, lease_until) WHERE status IN
-- ('pending', 'published', 'running'): every query that reads pending runs of a shard is
-- answered by it (the buffered ones through `lease_until IS NULL`). One index entry less per
-- run created.
DROP INDEX job_runs_pending;
