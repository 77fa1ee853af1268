-- 0007: retention never removes a run still in flight.
-- A leader catching up after a long outage (misfire run_all) creates runs whose scheduled_at is
-- older than the retention; they land in the default partition (or in an old day's partition
-- not dropped yet). 0001's retention deleted them whatever their status, so a run claimed a
-- second earlier could vanish before any worker saw it. Now:
--   * a daily partition older than the cutoff is dropped only when none of its runs is in
--     flight (pending, published, running, retrying); otherwise it stays for a later gc;
--   * from the default partition only terminal rows (succeeded, dead, skipped) are deleted.
CREATE OR REPLACE FUNCTION job_runs_drop_partitions_before(keep_from date) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    busy boolean;
BEGIN
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'job_runs'::regclass
          AND c.relname ~ '^job_runs_p[0-9]{8}$'
          AND to_date(substr(c.relname, 11), 'YYYYMMDD') < keep_from
        ORDER BY c.relname
    LOOP
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %I WHERE status IN'
            ' (''pending'', ''published'', ''running'', ''retrying''))',
            part.relname
        ) INTO busy;
        CONTINUE WHEN busy;
        EXECUTE format('DROP TABLE %I', part.relname);
        RETURN NEXT part.relname;
    END LOOP;
    DELETE FROM job_runs_default
    WHERE scheduled_at < (keep_from::timestamp AT TIME ZONE 'UTC')
      AND status IN ('succeeded', 'dead', 'skipped');
END $$;
