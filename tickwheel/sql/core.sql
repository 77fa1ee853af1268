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
