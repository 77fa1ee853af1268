-- 0016: who paused a job, why and when (issue 51; the note issue 50 asks for); what operators
-- did in more detail; the CSRF tokens' shared secret.
--
-- One row per job, written in the pause's own transaction with the version the pause gave the
-- job: the note belongs to that pause only. A resume, a later pause without a note, or an edit
-- moves the version on, and the note is then no longer the job's (readers join on the version),
-- so no other write path needs to know this table. Kept out of `jobs`: a hot path reads that
-- row, and almost no job has a note. No foreign key: it would put a check on every row the
-- retention deletes from `jobs` (a million completed one-offs a day); the retention removes
-- the notes of jobs that are gone instead (`gc_pause_notes`).
CREATE TABLE job_pause_notes (
    tenant     text NOT NULL,
    job_id     text NOT NULL,
    version    bigint NOT NULL,
    paused_by  text NOT NULL,
    reason     text NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, job_id),
    CONSTRAINT job_pause_notes_reason_length CHECK (length(reason) BETWEEN 1 AND 500),
    CONSTRAINT job_pause_notes_by_length CHECK (length(paused_by) BETWEEN 1 AND 128)
);

-- The actions an operator took from the page now include trigger, backfill and delete, some
-- with a detail (the backfill's window); `detail` is free text, NULL for pause and resume.
ALTER TABLE ops_audit ADD COLUMN detail text;

-- The secret the registries sign the operators' CSRF tokens with (registry_api/ops/csrf.py),
-- drawn as 0013 draws the run-seal key: shared by every registry of the deployment, so a token
-- one issued is valid on the others behind the same address.
INSERT INTO cluster_secrets (name, secret)
VALUES ('csrf', sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')));
