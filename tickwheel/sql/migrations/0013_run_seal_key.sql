-- 0013: the key that seals run envelopes (issue 23; tickwheel/run_seal.py).
--
-- A shard leader seals each run envelope it publishes with a MAC under this key (header
-- `seal`); a worker that finds the seal valid runs the envelope's own content — the job's row
-- as the leader's claim read it, in the transaction that created the run — and its claim need
-- not read the job again. An envelope without a valid seal (produced by anyone else, or sealed
-- under another key) is claimed as before: what runs is the job's row as it is now.
--
-- The secret is made here, once, from the server's strong random source (gen_random_uuid
-- draws 122 random bits from pg_strong_random; two, hashed, give 256 bits), so a deployment
-- configures nothing: every scheduler and worker already trusts this database, and a producer
-- that can write to the run topics but cannot read this table cannot seal.
CREATE TABLE cluster_secrets (
    name        text PRIMARY KEY,
    secret      bytea NOT NULL CONSTRAINT cluster_secrets_length CHECK (length(secret) = 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO cluster_secrets (name, secret)
VALUES ('run_seal', sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')));
