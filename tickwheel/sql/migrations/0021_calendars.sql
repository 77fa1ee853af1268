-- 0021: exclusion calendars (issue 50, D-286). A tenant's named calendar: the instants the jobs
-- naming it do not run at (tickwheel/schedule/calendars.py reads `document`).
--   version     1 when created, +1 on every change (a delete too)
--   document    the calendar as accepted; NULL: deleted. A deleted calendar keeps its row, so
--               the scheduler processes' poll (`calendars_changed_since`) sees the delete the
--               way it sees a change; a PUT of the same name brings it back, version on.
--   change_xid  the change feed's key, as on `jobs` (docs/CHANGE_FEED.md)
--   intake_*    the last Kafka registration applied to it: a redelivered one changes nothing
CREATE TABLE calendars (
    tenant            text NOT NULL REFERENCES tenants (name),
    name              text NOT NULL CONSTRAINT calendars_name_form
                      CHECK (name ~ '^[A-Za-z0-9_-][A-Za-z0-9._-]*$' AND length(name) <= 64),
    version           bigint NOT NULL DEFAULT 1,
    document          jsonb,
    change_xid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    intake_partition  integer,
    intake_offset     bigint,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);
CREATE INDEX calendars_changes ON calendars (change_xid);

-- The calendars a cron job names (NULL: none). A leader's horizon reads it with the job.
-- Nullable without a default: adding it rewrites no row.
ALTER TABLE jobs ADD COLUMN calendars text[];
-- A calendar's delete looks for the jobs still naming it while it holds the calendar's row:
-- through this index, not a scan of the tenant's jobs. Partial: a job naming no calendar has
-- no entry, so its writes cost nothing more (and its updates stay HOT).
CREATE INDEX jobs_calendars ON jobs USING gin (calendars) WHERE calendars IS NOT NULL;
