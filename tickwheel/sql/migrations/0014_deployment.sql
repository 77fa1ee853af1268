-- 0014: the deployment this database belongs to (issue 48; docs/DECISIONS.md D-048).
--
-- One deployment — one topic prefix — per database. Shard epochs, claims and the run ledger
-- are per database, while election is per prefix in ZooKeeper: a scheduler of another
-- prefix on this database would lead every shard and publish this deployment's runs to topics
-- no worker of it reads. So the database names its deployment, and schedulers, workers and
-- registries of any other prefix refuse to start (tickwheel/deployment.py). The row is written
-- by `tickwheel db migrate` (the prefix it runs under) and changed only by
-- `tickwheel db deployment rename`.
--
-- It also holds what every registry of the deployment must agree on for the replay memory
-- (`registration_ids`, migration 0010), so that registries with different signature windows
-- open no gap for a replay: the longest any registry keeps a message id past its signing
-- instant (its signature window plus the clock skew allowed: `replay_memory_ms`; the
-- retention keeps every id that long), and the instant from which the memory is complete for
-- that length (`replay_memory_from`): a window widened now was kept only for the narrower one
-- so far.
CREATE TABLE deployment (
    singleton              boolean PRIMARY KEY DEFAULT true
                           CONSTRAINT deployment_one_row CHECK (singleton),
    topic_prefix           text NOT NULL CONSTRAINT deployment_prefix_form
                           CHECK (topic_prefix ~ '^[A-Za-z0-9._-]{1,100}$'),
    recorded_at            timestamptz NOT NULL DEFAULT now(),
    replay_memory_ms       bigint,
    replay_memory_from     timestamptz
);
