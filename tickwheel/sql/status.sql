-- The queries of `tickwheel status` (tickwheel/operations/status.py). Times leave as integer
-- UTC milliseconds.

-- status_shard_leaders --
-- The last takeover of each shard: who, which epoch, since when.
SELECT shard_id, owner, epoch, (extract(epoch FROM since) * 1000)::bigint AS since_ms
FROM shard_leaders
ORDER BY shard_id

-- status_shards_behind --
-- Per shard, how long its oldest due job has waited to be claimed (no row: none is due).
-- Reads the partial index jobs_due (shard_id, next_run_at).
SELECT shard_id, (extract(epoch FROM now() - min(next_run_at)) * 1000)::bigint AS behind_ms
FROM jobs
WHERE status = 'active' AND next_run_at <= now()
GROUP BY shard_id
