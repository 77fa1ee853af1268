-- The core's queries (tickwheel/db.py): schema migrations and job_runs partition upkeep.
-- Every .sql file here holds named blocks: a line `-- name --` starts one, loaded by
-- tickwheel/queries.py. Always bind parameters ($1, $2, …); never format values into these texts.

-- migrations_table --
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- migrations_lock --
-- One migrator at a time across processes; the key is an arbitrary constant ("tickwhl").
SELECT pg_advisory_xact_lock(7449627562248044)

-- migrations_applied --
SELECT version FROM schema_migrations ORDER BY version

-- migration_record --
INSERT INTO schema_migrations (version, name) VALUES ($1, $2)

-- partitions_ensure --
SELECT job_runs_ensure_partitions($1::date, $2::integer)

-- partitions_drop_before --
SELECT job_runs_drop_partitions_before($1::date) AS dropped

-- run_seal_key --
-- The key run envelopes are sealed with (tickwheel/run_seal.py); no row: nothing is sealed.
SELECT secret FROM cluster_secrets WHERE name = 'run_seal'

-- csrf_secret --
-- The secret the registries sign the operators' CSRF tokens with (migration 0016); no row:
-- each registry draws its own.
SELECT secret FROM cluster_secrets WHERE name = 'csrf'

-- deployment_read --
-- The deployment this database belongs to (migration 0014); no row: none recorded yet.
SELECT topic_prefix, recorded_at, replay_memory_ms, replay_memory_from FROM deployment

-- deployment_record --
-- Record $1 as the database's deployment unless one is recorded already; answers the one in
-- force either way (the caller refuses a different one: tickwheel/deployment.py).
WITH recorded AS (
    INSERT INTO deployment (topic_prefix) VALUES ($1)
    ON CONFLICT (singleton) DO NOTHING
    RETURNING topic_prefix
)
SELECT topic_prefix FROM recorded
UNION ALL
SELECT topic_prefix FROM deployment
LIMIT 1

-- deployment_rename --
-- The operator's explicit rename ($1 → $2); no row answered: $1 is not the deployment.
UPDATE deployment SET topic_prefix = $2, recorded_at = now()
WHERE topic_prefix = $1
RETURNING topic_prefix

-- deployment_led_shards --
-- Shards whose leader has not stepped down: a deployment's schedulers may still be running.
SELECT count(*) FROM shard_leaders WHERE owner IS NOT NULL

-- deployment_widen_replay_memory --
-- A registry starting that keeps message ids $1 ms past their signing (its signature window
-- plus the skew allowed): the deployment's memory becomes the longer of the two. When this
-- lengthens it, ids were kept only for the shorter time until now, so the memory is complete
-- only for messages signed since now - old length (a first length recorded is taken as the
-- memory's so far); the minute's margin covers a retention delete that started before this
-- commit with the old length. Answers the length and the instant (unix ms) from which the
-- memory is complete.
UPDATE deployment AS d
SET replay_memory_ms = greatest(coalesce(d.replay_memory_ms, $1), $1),
    replay_memory_from = CASE
        WHEN d.replay_memory_ms IS NULL
            THEN now() - $1 * interval '1 millisecond'
        WHEN $1 > d.replay_memory_ms
            THEN now() - d.replay_memory_ms * interval '1 millisecond' + interval '1 minute'
        ELSE d.replay_memory_from
    END
RETURNING d.replay_memory_ms,
          floor(extract(epoch FROM d.replay_memory_from) * 1000)::bigint AS complete_from_ms
