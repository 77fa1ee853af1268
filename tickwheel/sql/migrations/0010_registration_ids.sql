-- 0010: the message ids of signed registrations (registry_api/intake.py, issue 28).
--   registration_ids  one row per (tenant, message id) of a registration signed in form 2
--                     (tickwheel/signatures.py), with where the intake received it. The same
--                     id again at another position is a replay: rejected, it changes
--                     nothing. A row is needed only while a message with its signing instant
--                     is still taken (the signature window, plus the clock skew allowed):
--                     `expires_at`; the retention (`tickwheel gc`, daily on shard 0's leader)
--                     removes the rows past it.
CREATE TABLE registration_ids (
    tenant            text NOT NULL,
    message_id        text NOT NULL,
    source_topic      text NOT NULL,
    source_partition  integer NOT NULL,
    source_offset     bigint NOT NULL,
    signed_at         timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    received_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, message_id)
);
CREATE INDEX registration_ids_expires ON registration_ids (expires_at);
