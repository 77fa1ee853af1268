CREATE TABLE job_positions (
    tenant text NOT NULL, job_id text NOT NULL, shard_id integer NOT NULL,
    status text NOT NULL, next_run_at timestamptz,
    PRIMARY KEY (tenant, job_id)
);
CREATE INDEX job_positions_due ON job_positions (shard_id, next_run_at) WHERE status = 'active';
CREATE FUNCTION job_positions_copy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_positions VALUES (NEW.tenant, NEW.job_id, NEW.shard_id, NEW.status, NEW.next_run_at)
    ON CONFLICT (tenant, job_id) DO UPDATE SET status = EXCLUDED.status, next_run_at = EXCLUDED.next_run_at;
    RETURN NULL;
END $$;
CREATE TRIGGER job_positions_copy AFTER INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION job_positions_copy();
