-- 0001: tenants and API keys, jobs, the run ledger and shard leadership (DESIGN §4).
-- Constraint names are part of the code's contract: tickwheel/db.py maps them to domain errors.

CREATE TABLE tenants (
    name        text PRIMARY KEY CONSTRAINT tenants_name_form CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- API keys are random 256-bit secrets, so a plain SHA-256 is a sufficient hash (no need for a
-- slow password KDF); `prefix` lets an operator recognise a key without storing it.
CREATE TABLE api_keys (
    key_hash    bytea PRIMARY KEY,
    prefix      text NOT NULL,
    tenant      text NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

CREATE TABLE jobs (
    tenant              text NOT NULL REFERENCES tenants (name),
    -- The same form as '^[A-Za-z0-9._:-]{1,128}$', written so: Postgres's regex engine
    -- expands a bounded repeat into 128 states, which made this check cost a fifth of a row
    -- insert; an unbounded repeat plus a length test costs a fraction of that.
    job_id              text NOT NULL CONSTRAINT jobs_id_form
                        CHECK (job_id ~ '^[A-Za-z0-9._:-]+$' AND length(job_id) <= 128),
    shard_id            integer NOT NULL CONSTRAINT jobs_shard_nonnegative CHECK (shard_id >= 0),
    kind                text NOT NULL CONSTRAINT jobs_kind CHECK (kind IN ('cron', 'once')),
    schedule            text,
    run_at              timestamptz,
    timezone            text NOT NULL DEFAULT 'UTC',
    handler             text,
    target              jsonb,
    payload             jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority            text NOT NULL DEFAULT 'normal'
                        CONSTRAINT jobs_priority CHECK (priority IN ('high', 'normal', 'low')),
    max_attempts        integer NOT NULL DEFAULT 5 CONSTRAINT jobs_max_attempts CHECK (max_attempts >= 1),
    backoff_base_ms     bigint NOT NULL DEFAULT 10000 CHECK (backoff_base_ms >= 0),
    backoff_cap_ms      bigint NOT NULL DEFAULT 600000 CHECK (backoff_cap_ms >= backoff_base_ms),
    timeout_ms          bigint NOT NULL DEFAULT 300000 CHECK (timeout_ms > 0),
    misfire_policy      text NOT NULL DEFAULT 'run_once'
                        CHECK (misfire_policy IN ('skip', 'run_once', 'run_all')),
    misfire_grace_ms    bigint NOT NULL DEFAULT 60000 CHECK (misfire_grace_ms >= 0),
    misfire_max_catchup integer NOT NULL DEFAULT 10 CHECK (misfire_max_catchup >= 1),
    overlap_policy      text NOT NULL DEFAULT 'allow'
                        CHECK (overlap_policy IN ('allow', 'skip', 'buffer_one')),
    dst_gap             text NOT NULL DEFAULT 'shift' CHECK (dst_gap IN ('shift', 'skip')),
    dst_overlap         text NOT NULL DEFAULT 'first' CHECK (dst_overlap IN ('first', 'last', 'both')),
    status              text NOT NULL DEFAULT 'active'
                        CONSTRAINT jobs_status CHECK (status IN ('active', 'paused', 'completed', 'deleted')),
    next_run_at         timestamptz,
    version             bigint NOT NULL DEFAULT 1,
    -- The change feed (docs/CHANGE_FEED.md): the id of the transaction that last wrote the
    -- row. Unlike a sequence value, it lets a poller that remembers the xmin of its previous
    -- snapshot miss no commit, whatever order concurrent writers commit in.
    change_xid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    -- Position of the last registration message applied to this row (partition, offset):
    -- a redelivered message at or below it is a no-op, so intake replays change nothing.
    intake_partition    integer,
    intake_offset       bigint,
    document            jsonb NOT NULL,  -- the job document as accepted (idempotent re-POST)
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id),
    CONSTRAINT jobs_schedule_xor_at CHECK ((kind = 'cron' AND schedule IS NOT NULL AND run_at IS NULL)
                                        OR (kind = 'once' AND run_at IS NOT NULL AND schedule IS NULL)),
    CONSTRAINT jobs_handler_xor_target CHECK ((handler IS NULL) <> (target IS NULL))
);

-- The horizon load: a shard's active jobs due before now + horizon, in due order.
CREATE INDEX jobs_due ON jobs (shard_id, next_run_at) WHERE status = 'active';
-- The change feed of a shard.
CREATE INDEX jobs_changes ON jobs (shard_id, change_xid);

CREATE FUNCTION jobs_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE TRIGGER jobs_touch BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION jobs_touch();

-- Wake-up hint for shard leaders: NOTIFY tickwheel_jobs with the shard id. Postgres folds
-- identical payloads within a transaction, so a batch of writes sends one per shard. It is a
-- hint only; the change feed above is the source of truth (notifications are lost while a
-- listener is disconnected). Statement-level over the transition table: one call per
-- statement and shard instead of a PL/pgSQL call per row (a batch writes thousands of rows).
-- Postgres allows a transition table on a trigger of one event only, hence two triggers.
CREATE FUNCTION jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tickwheel_jobs', s.shard_id::text)
    FROM (SELECT DISTINCT shard_id FROM written) AS s;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify();
CREATE TRIGGER jobs_notify_update AFTER UPDATE ON jobs REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify();

CREATE TABLE shard_leaders (
    shard_id    integer PRIMARY KEY CHECK (shard_id >= 0),
    epoch       bigint NOT NULL DEFAULT 0,
    owner       text,
    since       timestamptz NOT NULL DEFAULT now()
);

-- The run ledger and outbox (I1). Run key = tenant/job_id@unix_ms, stored as its parts.
-- Range-partitioned by day on scheduled_at so that retention is a partition drop; the
-- default partition catches instants outside the prepared range (old catch-up runs) so
-- that an insert never fails for want of a partition (I7).
CREATE TABLE job_runs (
    tenant          text NOT NULL,
    job_id          text NOT NULL,
    scheduled_at    timestamptz NOT NULL,
    shard_id        integer NOT NULL,
    priority        text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CONSTRAINT job_runs_status CHECK (status IN ('pending', 'published', 'running',
                        'succeeded', 'retrying', 'dead', 'skipped')),
    attempt         integer NOT NULL DEFAULT 0,
    epoch           bigint NOT NULL,
    lease_until     timestamptz,
    retry_at        timestamptz,
    worker          text,
    started_at      timestamptz,
    finished_at     timestamptz,
    last_error      text,
    skip_reason     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id, scheduled_at)
) PARTITION BY RANGE (scheduled_at);

CREATE TABLE job_runs_default PARTITION OF job_runs DEFAULT;

-- Retries a shard leader must re-dispatch (I6), and outbox rows not yet published.
CREATE INDEX job_runs_retry ON job_runs (shard_id, retry_at) WHERE status = 'retrying';
CREATE INDEX job_runs_pending ON job_runs (shard_id, scheduled_at) WHERE status = 'pending';

-- One partition per UTC day: job_runs_pYYYYMMDD. Creating one that exists is a no-op. A day
-- that already has rows in the default partition is left there (Postgres refuses to carve a
-- partition out of a default that holds its rows); retention still removes them.
CREATE FUNCTION job_runs_ensure_partitions(first_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    created integer := 0;
    part text;
BEGIN
    -- Two concurrent callers would race between the existence check and CREATE TABLE.
    PERFORM pg_advisory_xact_lock(7449627562248045);
    FOR i IN 0 .. days - 1 LOOP
        day := first_day + i;
        part := 'job_runs_p' || to_char(day, 'YYYYMMDD');
        IF to_regclass(part) IS NULL AND NOT EXISTS (
            SELECT 1 FROM job_runs_default
            WHERE scheduled_at >= (day::timestamp AT TIME ZONE 'UTC')
              AND scheduled_at < ((day + 1)::timestamp AT TIME ZONE 'UTC')) THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF job_runs FOR VALUES FROM (%L) TO (%L)',
                part, (day::timestamp AT TIME ZONE 'UTC'), ((day + 1)::timestamp AT TIME ZONE 'UTC'));
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

-- Drop whole daily partitions that end before `keep_from`, and delete the default
-- partition's rows older than it; returns the names of the partitions dropped.
CREATE FUNCTION job_runs_drop_partitions_before(keep_from date) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    part record;
BEGIN
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'job_runs'::regclass
          AND c.relname ~ '^job_runs_p[0-9]{8}$'
          AND to_date(substr(c.relname, 11), 'YYYYMMDD') < keep_from
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE %I', part.relname);
        RETURN NEXT part.relname;
    END LOOP;
    DELETE FROM job_runs_default WHERE scheduled_at < (keep_from::timestamp AT TIME ZONE 'UTC');
END $$;

SELECT job_runs_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, 9);
