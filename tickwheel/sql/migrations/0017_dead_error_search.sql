-- 0017: the operators' page finds dead runs by a piece of their error (issue 51, D-280).
--
-- Without an index, a search of a month of dead runs for a text none holds read every one of
-- them: 0.84 s at 200,000 dead runs (ops_views bench). A trigram index over the last error of
-- dead runs only: a run is written to it once, when it dies (a rare path), and never on the hot
-- path, whose rows are not dead. pg_trgm is a trusted extension (Postgres 13+): a role that may
-- create objects in the database creates it; where the deployment's role may not, an
-- administrator runs `CREATE EXTENSION pg_trgm` once before this migration.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX job_runs_dead_error ON job_runs USING gin (last_error gin_trgm_ops)
    WHERE status = 'dead';
