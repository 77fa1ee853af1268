CREATE TABLE run_outcomes (
    tenant text NOT NULL, job_id text NOT NULL, scheduled_at timestamptz NOT NULL,
    attempt integer NOT NULL, status text NOT NULL, finished_at timestamptz NOT NULL,
    error text,
    PRIMARY KEY (tenant, job_id, scheduled_at)
);
