-- 0015: the operators' record of what they changed from the status page (issue 51).
--
-- One row per action taken through `/v1/ops/…` (pause and resume of a job so far): who — the
-- operator key's name —, what, on which job, when, and the registry's answer. The replay audit
-- (0004) is the record of dead-letter replays, with their filters, budgets and per-run rows;
-- a job action has none of those, so it gets this table instead of bending that one.
CREATE TABLE ops_audit (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    operator  text NOT NULL,
    action    text NOT NULL,
    tenant    text NOT NULL,
    job_id    text NOT NULL,
    result    text NOT NULL
);
CREATE INDEX ops_audit_job ON ops_audit (tenant, job_id, id);
