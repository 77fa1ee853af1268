-- The local stack's own statements (tickwheel/stack/): run only against the private clusters
-- it starts, never against a deployment's database.

-- stack_standby_streaming --
-- Whether a standby streams from this primary (the replicated stack's synchronous standby).
SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE state = 'streaming')

-- stack_sync_standbys --
-- From now on a commit returns only once one standby (any) has flushed it. A literal: ALTER
-- SYSTEM takes no parameters; `stack_reload_conf` applies it.
ALTER SYSTEM SET synchronous_standby_names = '*'

-- stack_reload_conf --
SELECT pg_reload_conf()
