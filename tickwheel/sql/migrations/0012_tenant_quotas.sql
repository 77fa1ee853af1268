-- 0012: per-tenant quotas on registered jobs and on registrations per second (issue 25),
-- enforced by the registry's batch write (registry_api/store.py, registry_api/quotas.py).
--
--   tenants.max_jobs                   jobs a tenant may have registered at once (rows not
--                                      deleted: active, paused, completed one-offs until the
--                                      retention removes them); NULL: no quota.
--   tenants.max_registrations_per_s    registrations (every operation the registry applies for
--                                      the tenant, over HTTP or Kafka) per second; NULL: none.
--   tenants.registrations_burst        how many may come at once; NULL: one second's worth.
--   tenant_usage                       one row per tenant, the quotas' state, written in the
--                                      same transaction as the jobs: `jobs`, the tenant's
--                                      registered jobs (a counter, never a count(*) per
--                                      request), and `registrations_tat_us`, the rate's GCRA
--                                      theoretical arrival time (unix microseconds).
-- Its own table, not columns of `tenants`: a job insert's foreign key check share-locks the
-- tenant's row, and the counters are written by every batch that creates or deletes jobs.
ALTER TABLE tenants
    ADD COLUMN max_jobs integer CONSTRAINT tenants_max_jobs CHECK (max_jobs >= 0),
    ADD COLUMN max_registrations_per_s double precision
        CONSTRAINT tenants_max_registrations_per_s
        CHECK (max_registrations_per_s > 0 AND max_registrations_per_s <= 1000000),
    ADD COLUMN registrations_burst integer
        CONSTRAINT tenants_registrations_burst CHECK (registrations_burst >= 1);

CREATE TABLE tenant_usage (
    tenant                text PRIMARY KEY REFERENCES tenants (name) ON DELETE CASCADE,
    jobs                  bigint NOT NULL DEFAULT 0,
    registrations_tat_us  bigint NOT NULL DEFAULT 0
);

INSERT INTO tenant_usage (tenant, jobs)
SELECT t.name, (SELECT count(*) FROM jobs j WHERE j.tenant = t.name AND j.status <> 'deleted')
FROM tenants t;

-- Every tenant has its row, however it was created (tests and tools insert tenants directly):
-- the batch write then only ever updates rows.
CREATE FUNCTION tenant_usage_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_usage (tenant) VALUES (NEW.name) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER tenants_usage_row AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenant_usage_row();
