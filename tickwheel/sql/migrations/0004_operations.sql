-- 0004: the operators' record of dead-letter replays (`tickwheel dlq replay`, `dlq audit`).
--   replay_audit       one row per replay that was not a dry run: who, when, with which
--                      filters and budget, and how many runs it replayed, skipped and refused.
--                      `finished_at` NULL with `outcome` 'running' after the fact means the
--                      process died mid-way; the per-run rows below still say what it did.
--   replay_audit_runs  one row per candidate of such a replay and what became of it, so that
--                      `tickwheel dlq show` / `runs show` can say which replay touched a run.
CREATE TABLE replay_audit (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    operator     text NOT NULL,
    filters      jsonb NOT NULL,
    attempts     integer CHECK (attempts >= 1),  -- the fresh budget; NULL: each job's own
    rate_per_s   double precision CHECK (rate_per_s > 0),
    outcome      text NOT NULL DEFAULT 'running'
                 CONSTRAINT replay_audit_outcome
                 CHECK (outcome IN ('running', 'completed', 'interrupted', 'failed')),
    selected     integer NOT NULL DEFAULT 0,
    replayed     integer NOT NULL DEFAULT 0,
    skipped      integer NOT NULL DEFAULT 0,
    refused      integer NOT NULL DEFAULT 0
);

CREATE TABLE replay_audit_runs (
    audit_id      bigint NOT NULL REFERENCES replay_audit (id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    job_id        text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    outcome       text NOT NULL CONSTRAINT replay_audit_runs_outcome
                  CHECK (outcome IN ('replayed', 'skipped', 'refused')),
    reason        text,
    PRIMARY KEY (audit_id, tenant, job_id, scheduled_at)
);
CREATE INDEX replay_audit_runs_run ON replay_audit_runs (tenant, job_id, scheduled_at);
